// mixgrad/ops/linalg.hpp — matrix products (oneDNN / cuBLAS).
//
//   F::matmul(a, b);         // [m,k]x[k,n]; batched [...,m,k]x[...,k,n] with
//                            // broadcast batch dims; 1-d operands as NumPy
//   F::linear(x, w, b);      // x·wᵀ + b, w: [out, in]
#pragma once

#include "mixgrad/tensor.hpp"

namespace mixgrad::F {

/// The matrix product with NumPy's rules: batch dims broadcast, a 1-d operand
/// is a row (left) or column (right) vector whose dim is dropped from the
/// result. a and b share a floating dtype (autocast runs matmul in low
/// precision); products accumulate in float32 (float64 for float64).
Tensor matmul(const Tensor& a, const Tensor& b);
/// x·wᵀ + b with w of shape [out_features, in_features]; b may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace mixgrad::F
