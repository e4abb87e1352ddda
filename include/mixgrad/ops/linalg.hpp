// mixgrad/ops/linalg.hpp — matrix products (oneDNN / cuBLAS).
//
//   F::matmul(a, b);         // [m,k]x[k,n]; batched [...,m,k]x[...,k,n] with
//                            // broadcast batch dims; 1-d operands as NumPy
//   F::linear(x, w, b);      // x·wᵀ + b, w: [out, in]
#pragma once

#include "mixgrad/tensor.hpp"

namespace mixgrad::F {

Tensor matmul(const Tensor& a, const Tensor& b);
/// x·wᵀ + b with w of shape [out_features, in_features]; b may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace mixgrad::F
