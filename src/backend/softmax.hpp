// Backend seam of F::softmax and F::log_softmax along one axis. The tensor is
// viewed as [outer, axis, inner]. On the CPU: oneDNN softmax (accurate / log)
// for float32 and bfloat16, float16 by way of float32; loops accumulating in
// float (double for float64) otherwise. The backward needs only the output.
//
//   backend::softmax_forward(x, y, {outer, n, inner}, SoftmaxKind::log_softmax);
//   backend::softmax_backward(gy, y, gx, {outer, n, inner}, SoftmaxKind::log_softmax);
#pragma once

#include "backend/dispatch.hpp"

namespace mixgrad::backend {

enum class SoftmaxKind : uint8_t { softmax, log_softmax };

/// A contiguous tensor seen as [outer, axis, inner], normalised along axis.
struct SoftmaxShape {
  int64_t outer = 1;
  int64_t axis = 1;
  int64_t inner = 1;
};

/// y = exp(x - max) / sum exp(x - max) (softmax) or x - max - log sum exp(x - max)
/// (log_softmax) along the axis; x, y contiguous, one dtype.
MIXGRAD_STUB(softmax_forward, 1,
             void(const Tensor& x, const Tensor& y, const SoftmaxShape& s, SoftmaxKind kind));  // on y's device

/// gx = y * (gy - sum(gy * y)) (softmax) or gy - exp(y) * sum(gy)
/// (log_softmax), sums along the axis; y is the forward's output.
MIXGRAD_STUB(softmax_backward, 2,
             void(const Tensor& gy, const Tensor& y, const Tensor& gx, const SoftmaxShape& s,
                  SoftmaxKind kind));  // on gx's device

}  // namespace mixgrad::backend
