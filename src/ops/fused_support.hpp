// Small helpers shared by the library-fused ops (linalg, conv, pooling,
// batch_norm, softmax): copies an op makes of its inputs for a backend, which
// must not appear on the tape (the op's own entry covers them).
//
//   const Tensor xc = ops::dense(x);                    // contiguous, unrecorded
//   const Tensor w32 = ops::converted(w, DType::float32);
#pragma once

#include "backend/copy.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::ops {

/// t if contiguous, else a contiguous copy; never recorded.
inline Tensor dense(const Tensor& t) {
  if (!t.defined() || t.is_contiguous()) return t;
  Tensor out = empty(t.shape(), t.dtype(), t.device());
  backend::copy(t, out);
  return out;
}

/// t's values as a contiguous tensor of dtype dt (t itself when it is one);
/// never recorded. Undefined stays undefined.
inline Tensor converted(const Tensor& t, DType dt) {
  if (!t.defined() || (t.dtype() == dt && t.is_contiguous())) return t;
  Tensor out = empty(t.shape(), dt, t.device());
  backend::copy(t, out);
  return out;
}

}  // namespace mixgrad::ops
