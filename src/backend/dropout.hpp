// Backend seam of dropout: one kernel that multiplies by the keep mask and
// the 1 / (1 - p) scale. The forward applies it to x, the backward to the
// gradient with the same (seed, first counter): the mask is regenerated, not
// stored.
//
//   backend::dropout_apply(x, out, {.mask = {seed, first, threshold}, .scale = 1 / (1 - p)});
#pragma once

#include "backend/dispatch.hpp"
#include "kernels/dropout.hpp"

namespace mixgrad::backend {

struct DropoutParams {
  kernels::DropoutMask mask;
  double scale = 1.0;  // 1 / (1 - p)
};

/// dst[i] = keep(i) ? src[i] * scale : 0, with i the row-major index; src and
/// dst contiguous, same shape and floating dtype.
MIXGRAD_STUB(dropout_apply, 1, void(const Tensor& src, const Tensor& dst, const DropoutParams& p));  // on dst's device

}  // namespace mixgrad::backend
