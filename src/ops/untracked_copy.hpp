// Copies an op makes for its kernels without a tape entry: a contiguous
// and / or converted copy of an input or of an incoming gradient. An op that
// reads a strided input through such a copy is still one node on the tape,
// whose input is the original tensor (Tensor::contiguous() or F::astype
// would add a node of their own).
//
//   const Tensor xd = ops::dense(x);                    // x itself when contiguous
//   const Tensor gd = ops::dense(g, DType::float32);    // also converted
//   const Tensor g2 = ops::in_dtype(g, x.dtype());      // converted only (g itself, any layout, if already x's dtype)
//   ops::overwrite(weight, loaded);                     // in place, for layers above ops (nn)
#pragma once

#include "backend/copy.hpp"
#include "hooks/tape.hpp"
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

/// Writes src's values into dst in place (converted to dst's dtype, moved
/// from another device first), without a tape entry, and bumps dst's
/// version so what is cached on it (autocast's weight casts) is renewed:
/// loading a state dict, initialising a weight, appending to a KV cache.
inline void overwrite(const Tensor& dst, const Tensor& src) {
  autodiff::NoRecordScope no_record;  // src.to(device) of a tracked tensor is no op of the model
  backend::copy(src.device() == dst.device() ? src : src.to(dst.device()), dst);
  dst.bump_version();
}

/// Sets every element of dst to value, as overwrite does.
inline void overwrite(const Tensor& dst, double value) {
  backend::fill(dst, value);
  dst.bump_version();
}

}  // namespace mixgrad::ops
