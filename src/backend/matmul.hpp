// Backend seam of the matrix product (F::matmul, F::linear): a batched
// product with broadcast batch dims and an optional bias. On the CPU
// (cpu/matmul.cpp): oneDNN matmul for float32 and bfloat16 (float16 through
// float32), the built-in gemm otherwise.
//
//   backend::matmul(a, b, bias, out);          // out = a·b + bias
#pragma once

#include "backend/dispatch.hpp"

namespace mixgrad::backend {

/// out[..., m, n] = a[..., m, k] · b[..., k, n] (+ bias[n]). a, b and out have
/// the same rank (>= 2) and dtype, except on the CPU, where a and b may be
/// float32 beside a 16-bit out or a 16-bit operand beside a float32 out
/// (autocast's float32 operands where 16-bit math is missing: all computed
/// in float32); each batch extent of a and b equals out's
/// or is 1 (broadcast). a and b may have any strides (transposed views cost
/// nothing); out is contiguous; bias is undefined or [n], any floating dtype.
/// Accumulates in float32 (float64 for float64).
MIXGRAD_STUB(matmul, 3,
             void(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out));  // on out's device

}  // namespace mixgrad::backend
