// Pure index maps of the CUDA padding and 2-d resampling kernels
// (cuda/resize.cu): where an output element reads from. The CPU builds the
// same maps as per-axis tables (cpu/resize.cpp); here each thread computes
// its own entries, by the same formulas, so nothing is copied to the device.
// No CUDA headers: tests/cuda/test_cuda_resize_plan.cpp executes the plans
// on the host against the CPU backend.
//
//   const PadPlan pp = pad_plan(x.shape(), y.shape(), params);
//   int64_t src = pp.source(p);            // -1: the constant border
//   const AxisTaps t = axis_taps<float>(o, in, out, bilinear, align_corners, scale);
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/resize.hpp"
#include "mixgrad/half.hpp"
#include "mixgrad/shape.hpp"

namespace mixgrad::backend::cuda_plan {

/// Padding of the trailing `dims` dims of a contiguous tensor.
struct PadPlan {
  PadKind mode = PadKind::constant;
  int dims = 0;
  int64_t in_extent[8] = {};
  int64_t out_extent[8] = {};
  int64_t before[8] = {};
  int64_t in_plane = 1, out_plane = 1;

  /// Linear input offset read by output element `p` (row-major over the
  /// output), or -1 where it is the constant border.
  MIXGRAD_HOST_DEVICE int64_t source(int64_t p) const {
    const int64_t plane = p / out_plane;
    int64_t r = p % out_plane;
    int64_t off = 0, stride = 1;
    for (int d = dims - 1; d >= 0; --d) {
      const int64_t n = out_extent[d], in = in_extent[d];
      int64_t i = r % n - before[d];
      r /= n;
      if (i < 0 || i >= in) {
        if (mode == PadKind::constant) return -1;
        if (mode == PadKind::reflect)
          i = i < 0 ? -i : 2 * (in - 1) - i;  // the op checked pad < in
        else
          i = i < 0 ? 0 : in - 1;
      }
      off += i * stride;
      stride *= in;
    }
    return plane * in_plane + off;
  }
};

/// The plan of padding `in` to `out` as p says.
inline PadPlan pad_plan(const Shape& in, const Shape& out, const PadParams& p) {
  PadPlan pp;
  pp.mode = p.mode;
  pp.dims = p.dims;
  const int lead = in.ndim() - p.dims;
  for (int d = 0; d < p.dims; ++d) {
    pp.in_extent[d] = in[lead + d];
    pp.out_extent[d] = out[lead + d];
    pp.before[d] = p.before[static_cast<size_t>(d)];
    pp.in_plane *= in[lead + d];
    pp.out_plane *= out[lead + d];
  }
  return pp;
}

/// Two source taps along one axis and their weights (nearest: i1 == i0, w0 1, w1 0).
template <class Acc>
struct AxisTaps {
  int64_t i0 = 0, i1 = 0;
  Acc w0 = Acc(1), w1 = Acc(0);
};

template <class Acc>
MIXGRAD_HOST_DEVICE Acc floor_of(Acc v) {
  if constexpr (sizeof(Acc) == sizeof(float))
    return floorf(v);
  else
    return floor(v);
}

/// The taps of output position o along an axis of `in` inputs and `out`
/// outputs: PyTorch's nearest_idx (float arithmetic, exact 1x and 2x) or
/// its linear source index, as cpu/resize.cpp computes them.
template <class Acc>
MIXGRAD_HOST_DEVICE AxisTaps<Acc> axis_taps(int64_t o, int64_t in, int64_t out, bool bilinear, bool align_corners,
                                           double scale) {
  AxisTaps<Acc> t;
  if (!bilinear) {
    int64_t i;
    if (out == in) {
      i = o;
    } else if (out == 2 * in) {
      i = o >> 1;
    } else {
      const float s = scale > 0 ? static_cast<float>(1.0 / scale) : static_cast<float>(in) / static_cast<float>(out);
      i = static_cast<int64_t>(floorf(static_cast<float>(o) * s));
      if (i > in - 1) i = in - 1;
    }
    t.i0 = t.i1 = i;
    return t;
  }
  Acc s;
  if (align_corners)
    s = out > 1 ? static_cast<Acc>(in - 1) / static_cast<Acc>(out - 1) : Acc(0);
  else
    s = scale > 0 ? static_cast<Acc>(1.0 / scale) : static_cast<Acc>(in) / static_cast<Acc>(out);
  Acc src = align_corners ? s * static_cast<Acc>(o) : s * (static_cast<Acc>(o) + Acc(0.5)) - Acc(0.5);
  if (!align_corners && src < Acc(0)) src = Acc(0);
  int64_t i0 = static_cast<int64_t>(floor_of(src));
  if (i0 > in - 1) i0 = in - 1;
  Acc l1 = src - static_cast<Acc>(i0);
  l1 = l1 < Acc(0) ? Acc(0) : (l1 > Acc(1) ? Acc(1) : l1);
  t.i0 = i0;
  t.i1 = i0 + (i0 < in - 1 ? 1 : 0);
  t.w0 = Acc(1) - l1;
  t.w1 = l1;
  return t;
}

}  // namespace mixgrad::backend::cuda_plan
