// A view: a new tensor handle on another tensor's storage, with the shape,
// strides and element offset the caller gives. No check, no copy, no tape
// entry: the building block of the view ops (reshape, narrow, transpose ...)
// and of the internal re-indexing the ops and kernels do (a batch padded to
// a common rank, a reduction's gradient read with stride 0). The caller
// makes sure every element it addresses lies inside the storage.
//
//   Tensor t2 = view::make(t, Shape{rows, cols}, Shape{cols, 1});              // t's offset
//   Tensor part = view::make(t, shape, t.strides(), t.impl()->offset + start);  // another offset
#pragma once

#include <memory>

#include "mixgrad/tensor.hpp"

namespace mixgrad::view {

/// `base`'s storage seen as `shape` with `strides`, starting at element `offset`.
inline Tensor make(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset) {
  return Tensor(std::make_shared<TensorImpl>(base.impl()->storage, offset, shape, strides, base.dtype()));
}

/// As above, starting where `base` starts.
inline Tensor make(const Tensor& base, const Shape& shape, const Shape& strides) {
  return make(base, shape, strides, base.impl()->offset);
}

}  // namespace mixgrad::view
