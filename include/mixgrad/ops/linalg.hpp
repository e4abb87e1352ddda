// mixgrad/ops/linalg.hpp — matrix products (oneDNN / cuBLAS).
//
//   F::matmul(a, b);         // [m,k]x[k,n]; batched [...,m,k]x[...,k,n] with
//                            // broadcast batch dims; 1-d operands as NumPy
//   F::linear(x, w, b);      // x·wᵀ + b, w: [out, in]
//   F::addmm(c, a, b, {.beta = 0.5, .alpha = 2.0});   // 0.5 c + 2 a·b (PyTorch's addmm)
//   F::baddbmm(c, a, b);     // c + a[i]·b[i] per batch; addbmm: c + sum_i a[i]·b[i]
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

/// The scalars of addmm, baddbmm and addbmm: beta * input + alpha * product.
struct AddmmOptions {
  double beta = 1.0;   // 0: input is ignored (NaN and inf in it do not propagate), as PyTorch
  double alpha = 1.0;
};
/// beta * input + alpha * (mat1 · mat2) for mat1 [n, m], mat2 [m, p]; input
/// broadcasts to [n, p]. All floating, one dtype (autocast: low precision).
/// Composed of F:: ops (matmul, mul, add), so twice differentiable on every
/// device. ShapeError / DTypeError / DeviceError naming the op and operands.
Tensor addmm(const Tensor& input, const Tensor& mat1, const Tensor& mat2, const AddmmOptions& options = {});
/// beta * input + alpha * (batch1[i] · batch2[i]) for batch1 [B, n, m],
/// batch2 [B, m, p]; input broadcasts to [B, n, p]. Otherwise as addmm.
Tensor baddbmm(const Tensor& input, const Tensor& batch1, const Tensor& batch2, const AddmmOptions& options = {});
/// beta * input + alpha * sum_i (batch1[i] · batch2[i]) for batch1 [B, n, m],
/// batch2 [B, m, p] (one [n, B*m]·[B*m, p] product); input broadcasts to
/// [n, p]. Otherwise as addmm.
Tensor addbmm(const Tensor& input, const Tensor& batch1, const Tensor& batch2, const AddmmOptions& options = {});

}  // namespace mixgrad::F
