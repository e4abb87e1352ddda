// Pure index plans of the CUDA indexing kernels (cuda/indexing.cu). No CUDA
// headers: the host tests execute them against the CPU backend.
//
// gather / scatter_add: the byte offset of an index element's coordinates in
// the indexed tensor with the indexed axis left out (stride 0); the kernel
// adds index * the axis's byte stride (tests/cuda/test_cuda_resize_plan.cpp).
//
//   const auto ix = cuda_plan::axis_free_indexer(index.shape(), x.strides(), element_size(x.dtype()), axis);
//   int64_t off[1];  ix.offsets(p, off);   // + index[p] * x.strides()[axis] * esize
//
// index_put: the row of x (seen as [N, inner]) each entry of the k index
// tensors names (put_row), and which entry writes a row when several name it
// (put_wins): the CPU writes entries in order, so the last one naming a row
// is the one left. The kernel claims each row for its largest entry with an
// atomicMax (put_claim's device form), then only the claiming entry copies
// its values: deterministic, whatever order the threads run in
// (tests/cuda/test_cuda_put_argmax_plan.cpp).
//
//   int bad_j;  const int64_t r = cuda_plan::put_row(idx, extent, k, m, bad_j);   // -1: idx[bad_j][m] out of range
//   cuda_plan::put_claim(last, n_rows, r, m);   // last[r] = max(last[r], m), all m first
//   if (cuda_plan::put_wins(last, r, m)) copy values row m to out row r;
#pragma once

#include "backend/cuda/plan.hpp"

namespace mixgrad::backend::cuda_plan {

/// The indexer of `shape` into a tensor of element strides `strides` (element
/// size `esize`), with dimension `axis` contributing nothing.
inline StridedIndexer<1> axis_free_indexer(const Shape& shape, const Shape& strides, int64_t esize, int axis) {
  Shape s;
  for (int d = 0; d < shape.ndim(); ++d) s.push_back(d == axis ? 0 : strides[d] * esize);
  return make_indexer<1>(shape, {s});
}

/// The row of x seen as [extent[0] * ... * extent[k-1], inner] named by
/// entry m of the k index tensors idx[0..k) (each dense over the same
/// entries), a negative index counting from the end of its dimension; -1 with
/// bad_j = the first tensor whose index is outside [-extent, extent).
MIXGRAD_HOST_DEVICE inline int64_t put_row(const int64_t* const* idx, const int64_t* extent, int k, int64_t m,
                                           int& bad_j) {
  int64_t r = 0;
  for (int j = 0; j < k; ++j) {
    int64_t v = idx[j][m];
    if (v < -extent[j] || v >= extent[j]) {
      bad_j = j;
      return -1;
    }
    if (v < 0) v += extent[j];
    r = r * extent[j] + v;
  }
  bad_j = -1;
  return r;
}

/// Whether row r takes part in the claim: -1 marks a bad entry.
MIXGRAD_HOST_DEVICE inline bool put_claims(int64_t n_rows, int64_t r) { return r >= 0 && r < n_rows; }

/// Host form of the kernel's claim (there an atomicMax): row r remembers the
/// largest entry naming it (`last` starts at -1).
inline void put_claim(int64_t* last, int64_t n_rows, int64_t r, int64_t m) {
  if (put_claims(n_rows, r) && m > last[r]) last[r] = m;
}

/// True when entry m, naming row r, is the one whose values the row keeps
/// (the last entry naming it); false for a row out of range.
MIXGRAD_HOST_DEVICE inline bool put_wins(const int64_t* last, int64_t n_rows, int64_t r, int64_t m) {
  return put_claims(n_rows, r) && last[r] == m;
}

}  // namespace mixgrad::backend::cuda_plan
