// Multi-tensor kernels for gradient scaling and clipping: each call is one
// fused pass over a whole list of gradients, however many tensors it holds
// (GradScaler::unscale, clip_grad_norm), plus the scaled copy that makes a
// scaled upstream gradient.
//
//   bool bad = backend::scale_and_check(grads, 1.0 / scale);  // in place
//   double n = backend::grad_norm(grads, 2.0);
//
// The tensors must be floating, on one device, and must not overlap
// themselves (no zero strides); callers validate (amp/grad_list.hpp).
#pragma once

#include <cmath>
#include <cstdio>
#include <span>
#include <string>

#include "backend/dispatch.hpp"

namespace mixgrad::backend {

namespace cpu {
bool scale_and_check(std::span<const Tensor> tensors, double factor);
double grad_norm(std::span<const Tensor> tensors, double norm_type);
void scale_copy(const Tensor& src, const Tensor& dst, double factor);
}  // namespace cpu
namespace cuda {
bool scale_and_check(std::span<const Tensor> tensors, double factor);
double grad_norm(std::span<const Tensor> tensors, double norm_type);
void scale_copy(const Tensor& src, const Tensor& dst, double factor);
}  // namespace cuda

/// Multiplies every element of every tensor by `factor` in place (the factor
/// rounded once to float, or kept in double for float64 tensors) and returns
/// true when any stored result is inf or NaN. An empty list returns false.
/// Throws ValueError, touching nothing, when the factor is not finite in the
/// type it would be applied in: an inf factor would turn zeros into NaN and
/// report an overflow on every call (GradScaler keeps its reciprocal in
/// range; this guards the kernels against any caller that does not).
inline bool scale_and_check(std::span<const Tensor> tensors, double factor) {
  if (tensors.empty()) return false;
  bool in_float = false;
  for (const Tensor& t : tensors) in_float = in_float || t.dtype() != DType::float64;
  if (!std::isfinite(factor) || (in_float && !std::isfinite(static_cast<float>(factor)))) {
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", factor);
    throw ValueError(std::string("scale_and_check: factor ") + text + " is not finite in " +
                     (in_float ? "float" : "double") + " arithmetic");
  }
  MIXGRAD_DISPATCH(tensors.front().device(), scale_and_check, (tensors, factor));
}

/// The p-norm (`norm_type` > 0, or +inf for the largest |x|) of all elements
/// of all tensors taken together, accumulated in double. NaN anywhere gives
/// NaN; inf anywhere gives inf. An empty list has norm 0.
inline double grad_norm(std::span<const Tensor> tensors, double norm_type) {
  if (tensors.empty()) return 0.0;
  MIXGRAD_DISPATCH(tensors.front().device(), grad_norm, (tensors, norm_type));
}

/// dst = src * factor, elementwise; same shape, any dtypes, the product
/// formed in dst's arithmetic type.
inline void scale_copy(const Tensor& src, const Tensor& dst, double factor) {
  MIXGRAD_DISPATCH(dst.device(), scale_copy, (src, dst, factor));
}

}  // namespace mixgrad::backend
