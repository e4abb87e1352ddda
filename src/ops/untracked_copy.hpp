// Copies an op makes for its kernels without a tape entry: a contiguous
// and / or converted copy of an input or of an incoming gradient. An op that
// reads a strided input through such a copy is still one node on the tape,
// whose input is the original tensor (Tensor::contiguous() or F::astype
// would add a node of their own).
//
//   const Tensor xd = ops::dense(x);                    // x itself when contiguous
//   const Tensor gd = ops::dense(g, DType::float32);    // also converted
//   const Tensor g2 = ops::in_dtype(g, x.dtype());      // converted only (g itself, any layout, if already x's dtype)
#pragma once

#include "backend/copy.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::ops {

/// t if it is contiguous and of `dtype`, else a contiguous converted copy.
inline Tensor dense(const Tensor& t, DType dtype) {
  if (t.is_contiguous() && t.dtype() == dtype) return t;
  Tensor c = empty(t.shape(), dtype, t.device());
  backend::copy(t, c);
  return c;
}

/// t if it is contiguous, else a contiguous copy.
inline Tensor dense(const Tensor& t) { return dense(t, t.dtype()); }

/// t (any layout) if it has `dtype`, else a contiguous converted copy. For
/// gradients, which arrive in the output's dtype: this only guards.
inline Tensor in_dtype(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  return dense(t, dtype);
}

}  // namespace mixgrad::ops
