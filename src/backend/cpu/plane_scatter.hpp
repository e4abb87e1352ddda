// The CPU backwards that scatter an output gradient into its input (pooling,
// padding, resampling) share one loop: the input planes (image, channel) are
// split over threads, and each plane is summed in a compute-precision buffer
// of the thread's own before it is written out once, so no two threads touch
// the same element and no atomics are needed.
//
//   scatter_planes<T>(gx_data, planes, h * w, grain, [&](int64_t c, Acc* acc) {
//     for (...) acc[source_of(o)] += cast<Acc>(gy[c * oh * ow + o]);
//   });
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cast.hpp"
#include "kernels/loops.hpp"

namespace mixgrad::backend::cpu {

/// Writes `planes` planes of `plane_size` elements to `out`: plane c is what
/// body(c, acc) adds into a zeroed accumulator of kernels::compute_t<T>.
/// `grain` is parallel_for's, in planes.
template <class T, class Body>
void scatter_planes(T* out, int64_t planes, int64_t plane_size, int64_t grain, Body&& body) {
  using Acc = kernels::compute_t<T>;
  kernels::parallel_for(planes, grain, [&](int64_t c0, int64_t c1) {
    std::vector<Acc> acc(static_cast<size_t>(plane_size));
    for (int64_t c = c0; c < c1; ++c) {
      std::fill(acc.begin(), acc.end(), Acc(0));
      body(c, acc.data());
      T* o = out + c * plane_size;
      for (int64_t i = 0; i < plane_size; ++i) o[i] = kernels::cast<T>(acc[static_cast<size_t>(i)]);
    }
  });
}

}  // namespace mixgrad::backend::cpu
