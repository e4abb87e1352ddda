// A contiguous tensor seen as [outer, axis, inner] around one axis: the view
// of the backend families that work along an axis (indexing, scan, prod in
// reduction, sorting). The backend's own plain type, like extent2.hpp's.
//
//   const backend::Axis3 a = backend::axis3(x.shape(), dim);   // [2, 3, 4], dim 1: {2, 3, 4}
#pragma once

#include <cstdint>

#include "mixgrad/shape.hpp"

namespace mixgrad::backend {

/// A contiguous tensor viewed as [outer, axis, inner].
struct Axis3 {
  int64_t outer = 1;
  int64_t axis = 1;
  int64_t inner = 1;
};

/// The view of a tensor of shape `s` around `dim` (normalized): the product
/// of the extents before it, its extent, the product of those after it. A
/// 0-d shape is one line of one element.
inline Axis3 axis3(const Shape& s, int dim) {
  Axis3 a;
  if (s.ndim() == 0) return a;
  for (int d = 0; d < dim; ++d) a.outer *= s[d];
  a.axis = s[dim];
  for (int d = dim + 1; d < s.ndim(); ++d) a.inner *= s[d];
  return a;
}

}  // namespace mixgrad::backend
