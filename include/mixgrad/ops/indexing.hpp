// mixgrad/ops/indexing.hpp — picking elements by int64 indices, as in
// PyTorch: embedding lookups, index_select, gather, scatter_add and
// index_put.
//
//   auto e = F::embedding(table, tokens);          // [B, T] int64 -> [B, T, dim]
//   auto r = F::index_select(x, 0, idx);           // rows of x at idx (1-D), repeats allowed
//   auto g = F::gather(logits, 1, labels_2d);      // out[i][j] = x[i][index[i][j]]
//   auto s = F::scatter_add(zeros, 0, index, src); // x[index[i][j]][j] += src[i][j]
//   auto p = F::index_put(x, {rows}, v);           // a copy of x with x[rows] = v
//   auto q = F::index_put(x, {r, c}, v, {.accumulate = true});  // x[r, c] += v
//
// Index tensors are int64 and never differentiated; gradients flow to the
// floating inputs, and where an index repeats, its gradients add up. Every
// index is checked against the extent it indexes before anything runs: a
// negative or too large one is a ValueError naming the op, the index and the
// extent. Shape errors are ShapeError, a non-int64 index a DTypeError; all
// name the op and the tensors ("float32[2, 3]").
#pragma once

#include <vector>

#include "mixgrad/tensor.hpp"

namespace mixgrad::F {

/// Rows of `weight` ([num, dim], floating) picked by `indices` (int64, any
/// shape): the result has shape indices.shape + [dim]. PyTorch's
/// F.embedding, MegEngine's F.embedding. The gradient of weight adds up the
/// output gradients of every position that picked a row.
Tensor embedding(const Tensor& weight, const Tensor& indices);

/// The slices of x at positions `index` (1-D int64) along `dim`; the result
/// has x's shape with extent index.numel() along dim. Repeats allowed.
Tensor index_select(const Tensor& x, int dim, const Tensor& index);

/// out[p] = x[p with its `dim` coordinate replaced by index[p]] (PyTorch's
/// torch.gather): index has x's rank and, except along dim, extents no
/// larger than x's; the result has index's shape and x's dtype.
Tensor gather(const Tensor& x, int dim, const Tensor& index);

/// A copy of x with src[p] added at x[p with its `dim` coordinate replaced
/// by index[p]] (PyTorch's Tensor.scatter_add): index has x's rank, its
/// extents no larger than src's, nor than x's except along dim; only
/// src's leading index.shape block is read. x and src share a dtype (under
/// autocast, floating inputs are promoted to the wider one).
Tensor scatter_add(const Tensor& x, int dim, const Tensor& index, const Tensor& src);

/// Options of index_put.
struct IndexPutOptions {
  /// Add values at the indexed positions instead of overwriting them.
  bool accumulate = false;
};

/// A copy of x with `values` written at the positions the index tensors pick,
/// PyTorch's `torch.index_put(x, indices, values, accumulate)` (out of
/// place), that is `x[i0, i1, ..] = values` (`+=` with accumulate) for
/// k = indices.size() int64 index tensors, 1 <= k <= x.ndim(), one per
/// leading dimension of x. The index tensors broadcast together to a shape
/// B; the result is written at x[i0[b], .., ik-1[b], ...] for each b in B,
/// and `values` must broadcast to B + x.shape[k:]. Negative indices count
/// from the end as in PyTorch. With one index (`{rows}`) this is
/// `x[rows] = values` along dimension 0.
///
/// A position picked twice: with accumulate every value is added; without
/// it the last one in B's row-major order wins (PyTorch leaves that
/// undefined; here it is deterministic on every run). x and values share a
/// dtype (under autocast, floating inputs are promoted to the wider one).
///
/// Gradients: to x, the output gradient with zeros at the written positions
/// (all of it with accumulate); to values, the output gradient gathered at
/// the indices and summed over the dimensions values was broadcast along.
/// For a position picked twice without accumulate, every writer gets the
/// gradient, as in PyTorch. Both are computed with tracked ops, so the
/// gradient is differentiable again.
Tensor index_put(const Tensor& x, const std::vector<Tensor>& indices, const Tensor& values,
                 IndexPutOptions options = {});

}  // namespace mixgrad::F
