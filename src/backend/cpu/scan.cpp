// CPU scans (backend/scan.hpp). Each task runs the lines of one outer index
// and a block of inner positions (cpu/line_blocks.hpp) along the axis, with
// one running value per line in float (double for float64), rounded once
// per store.
#include "backend/cpu/line_blocks.hpp"
#include "backend/scan.hpp"
#include "kernels/cast.hpp"

namespace mixgrad::backend::cpu {

namespace {

using kernels::cast;
using kernels::compute_t;

}  // namespace

void cumsum(const Tensor& x, Axis3 a, bool reverse, const Tensor& out) {
  visit_floating(out.dtype(), "cumsum", [&]<class T>() {
    using C = compute_t<T>;
    const T* px = x.data<T>();
    T* po = static_cast<T*>(out.raw_data());
    for_line_blocks(a.outer, a.inner, x.numel(), [&](int64_t o, int64_t i0, int64_t i1) {
      C acc[kLineBlock] = {};
      for (int64_t step = 0; step < a.axis; ++step) {
        const int64_t k = reverse ? a.axis - 1 - step : step;
        const int64_t row = (o * a.axis + k) * a.inner;
        for (int64_t i = i0; i < i1; ++i) {
          acc[i - i0] += cast<C>(px[row + i]);
          po[row + i] = cast<T>(acc[i - i0]);
        }
      }
    });
  });
}

}  // namespace mixgrad::backend::cpu

namespace mixgrad::backend {

MIXGRAD_CPU_KERNEL(cumsum, cpu::cumsum);

}  // namespace mixgrad::backend
