// Contiguous inputs for fused kernels, without a tape entry: an op that
// reads a strided input through a copy is still one node on the tape, whose
// input is the original tensor (Tensor::contiguous() would add a clone node).
//
//   const Tensor xd = ops::dense(x);                    // x itself when contiguous
//   const Tensor gd = ops::dense(g, DType::float32);    // also converted
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

}  // namespace mixgrad::ops
