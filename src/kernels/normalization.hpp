// Element math of layer norm (which group and instance norm run too), shared
// by the CPU and CUDA kernels (backend/cpu/normalization.cpp,
// backend/cuda/normalization.cu). Works in the accumulation type `Acc`
// (float, or double for float64 tensors).
//
//   const float y = kernels::layer_norm_value(x, mean, rstd, w, b);
#pragma once

#include "kernels/cast.hpp"

namespace mixgrad::kernels {

/// y = (x - mean) * rstd * w + b for one element.
template <class Acc>
MIXGRAD_HOST_DEVICE inline Acc layer_norm_value(Acc x, Acc mean, Acc rstd, Acc w, Acc b) {
  return (x - mean) * rstd * w + b;
}

/// dx_j = rstd * (dy_j - mean(dy) - xhat_j * mean(dy * xhat)) with dy = g * w:
/// the gradient through the row's mean and variance, in one expression.
template <class Acc>
MIXGRAD_HOST_DEVICE inline Acc layer_norm_grad_x(Acc dy, Acc xhat, Acc rstd, Acc mean_dy, Acc mean_dy_xhat) {
  return rstd * (dy - mean_dy - xhat * mean_dy_xhat);
}

}  // namespace mixgrad::kernels
