// Backend seam of normalization: the fused layer-norm forward and backward
// per device, which group and instance norm run as well (ops/normalization.cpp
// views [N, C, *] as N * G rows).
//
// x is seen as [rows, cols] with cols the product of the normalised trailing
// dims. Statistics are kept in the accumulation dtype (float32, float64 for
// float64 input) for the backward, and so are the weight and bias the
// kernels see (the op converts them, a few elements, so a float32 weight
// works with a bfloat16 input). All tensors are contiguous.
//
//   backend::layer_norm_forward({.x = x, .weight = w, .bias = b, .rows = r, .cols = c, .eps = 1e-5},
//                               {.out = y, .mean = mean, .rstd = rstd});
#pragma once

#include <cstdint>

#include "backend/dispatch.hpp"

namespace mixgrad::backend {

struct LayerNormArgs {
  Tensor x;       // [rows * cols], floating
  Tensor weight;  // [cols] in the accumulation dtype, or undefined (1)
  Tensor bias;    // [cols] in the accumulation dtype, or undefined (0)
  int64_t rows = 0;
  int64_t cols = 0;
  double eps = 1e-5;
};
inline Device device_of(const LayerNormArgs& a) { return a.x.device(); }  // the kernels' device

/// What the forward writes.
struct LayerNormOutputs {
  Tensor out;   // like x
  Tensor mean;  // [rows], accumulation dtype
  Tensor rstd;  // [rows], 1 / sqrt(var + eps), accumulation dtype
};

/// What the backward writes; undefined members are not computed.
struct LayerNormGrads {
  Tensor x;       // x's dtype
  Tensor weight;  // accumulation dtype
  Tensor bias;    // accumulation dtype
};

/// out = (x - mean) * rstd * weight + bias per row, with mean and rstd saved.
MIXGRAD_STUB(layer_norm_forward, 0, void(const LayerNormArgs& a, const LayerNormOutputs& o));  // on a.x's device

/// Gradients for x, weight and bias from the saved mean and rstd (a.bias and
/// saved.out are not read). The weight and bias gradients are summed over rows in fixed
/// blocks: deterministic on any thread count.
MIXGRAD_STUB(layer_norm_backward, 0,
             void(const LayerNormArgs& a, const LayerNormOutputs& saved, const Tensor& grad_out,
                  const LayerNormGrads& grads));  // on a.x's device

}  // namespace mixgrad::backend
