// Pure plan of the CUDA row kernels (softmax, the class losses, layer norm):
// a contiguous tensor seen as [outer, length, inner] is outer * inner rows of
// `length` elements, `inner` apart. One CUDA block reduces one row (CUB
// BlockReduce, backend/cuda/block_reduce.cuh) and grid-strides over the
// rows. No CUDA headers: the host tests check that the rows tile the tensor
// exactly once in the CPU's (outer, axis, inner) order
// (tests/cuda/test_cuda_multi_plan.cpp).
//
//   const cuda_plan::RowPlan rp = cuda_plan::row_plan(s.outer, s.axis, s.inner);
//   kernel<<<rp.blocks, cuda_plan::kRowThreads, 0, stream>>>(rp, ...);
//   // in the kernel: for (r = blockIdx.x; r < rp.rows; r += gridDim.x)
//   //                  for (j = threadIdx.x; j < rp.length; j += blockDim.x) x[rp.at(r, j)] ...
#pragma once

#include <cstdint>

#include "mixgrad/half.hpp"

namespace mixgrad::backend::cuda_plan {

/// Threads per block of the row kernels.
inline constexpr int kRowThreads = 256;
/// Upper bound on the row kernels' grid; beyond it blocks stride over rows.
inline constexpr int64_t kMaxRowBlocks = int64_t{1} << 16;

struct RowPlan {
  int64_t rows = 0;     // outer * inner
  int64_t length = 0;   // elements per row
  int64_t inner = 1;    // distance between a row's elements
  unsigned blocks = 0;  // grid size; 0: nothing to launch

  /// Linear index of element 0 of row r, which is (o, i) = (r / inner, r % inner).
  MIXGRAD_HOST_DEVICE int64_t row_base(int64_t r) const {
    const int64_t o = r / inner, i = r - o * inner;
    return o * length * inner + i;
  }
  /// Linear index of element j of row r.
  MIXGRAD_HOST_DEVICE int64_t at(int64_t r, int64_t j) const { return row_base(r) + j * inner; }
};

/// The plan of [outer, length, inner] (all >= 0).
constexpr RowPlan row_plan(int64_t outer, int64_t length, int64_t inner) {
  RowPlan p;
  p.inner = inner < 1 ? 1 : inner;
  p.rows = outer * p.inner;
  p.length = length;
  const int64_t b = p.rows < kMaxRowBlocks ? p.rows : kMaxRowBlocks;
  p.blocks = length > 0 && outer > 0 && inner > 0 ? static_cast<unsigned>(b) : 0;
  return p;
}

/// Batch norm's per-channel view of a contiguous [N, C, S...] tensor (S the
/// product of the spatial dims): channel c is N rows of S values, C * S
/// apart. One block per channel; element j of the channel is (n, s) =
/// (j / S, j % S).
struct ChannelPlan {
  int64_t n = 0, c = 0, s = 0;
  unsigned blocks = 0;  // grid size; 0: nothing to launch

  MIXGRAD_HOST_DEVICE int64_t count() const { return n * s; }
  /// Linear index of element j of channel ch.
  MIXGRAD_HOST_DEVICE int64_t at(int64_t ch, int64_t j) const {
    const int64_t ni = j / s;
    return (ni * c + ch) * s + (j - ni * s);
  }
};

/// The plan of [n, c, s] (all >= 0).
constexpr ChannelPlan channel_plan(int64_t n, int64_t c, int64_t s) {
  ChannelPlan p;
  p.n = n;
  p.c = c;
  p.s = s;
  p.blocks = c > 0 ? static_cast<unsigned>(c < kMaxRowBlocks ? c : kMaxRowBlocks) : 0;
  return p;
}

}  // namespace mixgrad::backend::cuda_plan
