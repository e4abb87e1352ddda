// Pure index plan of the CUDA gather / scatter_add kernels (cuda/indexing.cu):
// the byte offset of an index element's coordinates in the indexed tensor
// with the indexed axis left out (stride 0); the kernel adds index * the
// axis's byte stride. No CUDA headers: tests/cuda/test_cuda_resize_plan.cpp
// executes it against the CPU's gather.
//
//   const auto ix = cuda_plan::axis_free_indexer(index.shape(), x.strides(), element_size(x.dtype()), axis);
//   int64_t off[1];  ix.offsets(p, off);   // + index[p] * x.strides()[axis] * esize
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

}  // namespace mixgrad::backend::cuda_plan
