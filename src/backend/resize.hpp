// Backend seam of the resizing ops (F::pad, F::interpolate). The CPU runs
// direct loops over (image, channel) planes; the gradients accumulate per
// plane in float (double for float64), so many output positions copied from
// one input element (replicate's corners, a large upsampling) sum without
// 16-bit rounding at each step.
//
//   backend::pad_forward(x, y, {.mode = backend::PadKind::reflect, .dims = 2, .before = {1, 1}});
//   backend::upsample2d_forward(x, y, {.bilinear = true});
#pragma once

#include <array>

#include "backend/dispatch.hpp"

namespace mixgrad::backend {

enum class PadKind : uint8_t { constant, reflect, replicate };

/// The op's validated padding: `dims` trailing dims are padded, before[i]
/// elements ahead of trailing dim i (counted from the first padded dim); the
/// amounts after them follow from the output's shape.
struct PadParams {
  PadKind mode = PadKind::constant;
  double value = 0.0;
  int dims = 0;
  std::array<int64_t, 8> before{};
};

/// Resampling of the last two dims. scale_* > 0 is the user's scale factor
/// (sampling at 1 / scale); 0 means in / out. align_corners is bilinear's.
struct UpsampleParams {
  bool bilinear = false;
  bool align_corners = false;
  double scale_h = 0.0;
  double scale_w = 0.0;
};

/// y (contiguous, x's dtype) = x padded as p says; x contiguous.
MIXGRAD_STUB(pad_forward, 1, void(const Tensor& x, const Tensor& y, const PadParams& p));  // on y's device
/// gx (overwritten) = sum of gy over the output positions each input element went to.
MIXGRAD_STUB(pad_backward, 1, void(const Tensor& gy, const Tensor& gx, const PadParams& p));  // on gx's device
/// y [N, C, OH, OW] = x [N, C, H, W] resampled; both contiguous, one dtype.
MIXGRAD_STUB(upsample2d_forward, 1, void(const Tensor& x, const Tensor& y, const UpsampleParams& p));  // on y's device
/// gx (overwritten) = the adjoint of the forward applied to gy.
MIXGRAD_STUB(upsample2d_backward, 1,
             void(const Tensor& gy, const Tensor& gx, const UpsampleParams& p));  // on gx's device

}  // namespace mixgrad::backend
