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

namespace cpu {
void softmax_forward(const Tensor& x, const Tensor& y, const SoftmaxShape& s, SoftmaxKind kind);
void softmax_backward(const Tensor& gy, const Tensor& y, const Tensor& gx, const SoftmaxShape& s, SoftmaxKind kind);
}  // namespace cpu
namespace cuda {
void softmax_forward(const Tensor& x, const Tensor& y, const SoftmaxShape& s, SoftmaxKind kind);
void softmax_backward(const Tensor& gy, const Tensor& y, const Tensor& gx, const SoftmaxShape& s, SoftmaxKind kind);
}  // namespace cuda

/// y = exp(x - max) / sum exp(x - max) (softmax) or x - max - log sum exp(x - max)
/// (log_softmax) along the axis; x, y contiguous, one dtype.
inline void softmax_forward(const Tensor& x, const Tensor& y, const SoftmaxShape& s, SoftmaxKind kind) {
  MIXGRAD_DISPATCH_CUDA(y.device(), softmax_forward, (x, y, s, kind));
}

/// gx = y * (gy - sum(gy * y)) (softmax) or gy - exp(y) * sum(gy)
/// (log_softmax), sums along the axis; y is the forward's output.
inline void softmax_backward(const Tensor& gy, const Tensor& y, const Tensor& gx, const SoftmaxShape& s,
                             SoftmaxKind kind) {
  MIXGRAD_DISPATCH_CUDA(gx.device(), softmax_backward, (gy, y, gx, s, kind));
}

}  // namespace mixgrad::backend
