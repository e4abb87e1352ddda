// mixgrad/ops/sorting.hpp — sorting along one axis, as in PyTorch: the k
// largest (or smallest) elements, a full sort, and the sorting permutation.
//
//   auto [vals, idx] = F::topk(logits, 5);          // 5 largest along the last axis
//   auto [asc, perm] = F::sort(x, 0);               // ascending along axis 0
//   mg::Tensor order = F::argsort(x, -1, true);     // int64, descending
//
// Values keep the input's dtype, indices are int64 positions along the axis.
// Ties keep their input order (the sort is stable; topk picks and lists the
// earlier of two equal elements first), and NaN counts as larger than every
// number, as in PyTorch: it comes first in a descending order, last in an
// ascending one. 16-bit values are compared in float. Gradients flow to the
// values only: the upstream gradient goes back to the positions the indices
// name. Errors (ShapeError for a bad axis, ValueError for k outside [0,
// extent]) name the op and the tensor, and are raised before anything runs.
#pragma once

#include <cstdint>

#include "mixgrad/tensor.hpp"

namespace mixgrad::F {

/// The two results of topk and sort; `auto [values, indices] = F::sort(x);`.
struct ValuesIndices {
  Tensor values;   ///< the input's dtype
  Tensor indices;  ///< int64 positions along the axis
};

/// The k largest (smallest when !largest) elements along `dim` and their
/// positions (torch.topk); the result has extent k along dim. They come in
/// order (largest first, or smallest first) whether or not `sorted` is asked
/// for, which PyTorch allows: `sorted = false` only leaves the order free.
ValuesIndices topk(const Tensor& x, int64_t k, int dim = -1, bool largest = true, bool sorted = true);

/// The elements along `dim` in ascending (descending) order with their
/// positions (torch.sort(stable=True)); equal elements keep their order.
ValuesIndices sort(const Tensor& x, int dim = -1, bool descending = false);

/// The positions that sort x along `dim` (torch.argsort(stable=True)); int64,
/// no gradient.
Tensor argsort(const Tensor& x, int dim = -1, bool descending = false);

}  // namespace mixgrad::F
