// Pure "plan" logic of the CUDA kernels: how many blocks a grid-stride loop
// launches, and how a linear element index maps to byte offsets in strided
// operands. No CUDA headers and no device needed, so the host tests check it
// against the CPU's loop order (tests/cuda/test_cuda_plan.cpp).
//
//   auto ix = cuda_plan::make_indexer<2>(dst.shape(), {byte_strides(dst), byte_strides(src)});
//   auto lc = cuda_plan::launch_config(dst.numel());   // lc.blocks == 0: nothing to launch
//   kernel<<<lc.blocks, lc.threads, 0, stream>>>(ix, ...);
//   // in the kernel, for linear index i:  int64_t off[2];  ix.offsets(i, off);
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "kernels/loops.hpp"
#include "mixgrad/half.hpp"
#include "mixgrad/shape.hpp"

namespace mixgrad::backend::cuda_plan {

/// Threads per block of the elementwise kernels.
inline constexpr int kThreadsPerBlock = 256;
/// Upper bound on blocks; beyond it the grid-stride loop covers the rest.
inline constexpr int64_t kMaxBlocks = int64_t{1} << 16;

/// Grid of a 1-d launch.
struct LaunchConfig {
  unsigned blocks = 0;   // 0 when there is nothing to do: do not launch
  unsigned threads = 0;
};

/// The grid for a grid-stride loop over `n` elements: enough blocks for one
/// element per thread, capped at `max_blocks`.
constexpr LaunchConfig launch_config(int64_t n, int threads = kThreadsPerBlock, int64_t max_blocks = kMaxBlocks) {
  if (n <= 0) return {};
  const int64_t blocks = std::min<int64_t>((n + threads - 1) / threads, max_blocks);
  return {static_cast<unsigned>(blocks), static_cast<unsigned>(threads)};
}

/// Maps the linear (row-major) index of an element of the iteration shape to
/// the byte offset of that element in each of N operands. Dimensions are
/// coalesced first (as the CPU loops do), so a contiguous tensor is one
/// dimension and costs one multiply. Trivially copyable: passed to kernels
/// by value.
template <int N>
struct StridedIndexer {
  int ndim = 0;
  int64_t extent[Shape::kMaxDims] = {};     // innermost dimension last
  int64_t stride[N][Shape::kMaxDims] = {};  // bytes

  MIXGRAD_HOST_DEVICE void offsets(int64_t linear, int64_t (&out)[N]) const {
    if (ndim == 1) {
      for (int k = 0; k < N; ++k) out[k] = linear * stride[k][0];
      return;
    }
    for (int k = 0; k < N; ++k) out[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const int64_t i = linear % extent[d];
      linear /= extent[d];
      for (int k = 0; k < N; ++k) out[k] += i * stride[k][d];
    }
  }
};

/// The indexer of `shape` with each operand's byte strides.
template <int N>
StridedIndexer<N> make_indexer(const Shape& shape, const std::array<Shape, N>& byte_strides) {
  const kernels::LoopShape<N> ls = kernels::coalesce<N>(shape, byte_strides);
  StridedIndexer<N> ix;
  ix.ndim = ls.ndim;
  for (int d = 0; d < ls.ndim; ++d) {
    ix.extent[d] = ls.extent[d];
    for (int k = 0; k < N; ++k) ix.stride[k][d] = ls.stride[k][d];
  }
  return ix;
}

}  // namespace mixgrad::backend::cuda_plan

namespace mixgrad::backend::cuda_plan {

/// Byte strides of an operand of shape `shape` and element strides `strides`
/// (element size `esize`) read in the iteration shape `iter` with NumPy
/// broadcasting: 0 along missing leading and extent-1 dimensions. The CPU
/// engine (cpu/map_loop.hpp) reads its operands the same way.
inline Shape broadcast_byte_strides(const Shape& shape, const Shape& strides, int64_t esize, const Shape& iter) {
  Shape s;
  const int lead = iter.ndim() - shape.ndim();
  for (int i = 0; i < iter.ndim(); ++i) {
    const int j = i - lead;
    s.push_back(j < 0 || shape[j] == 1 ? 0 : strides[j] * esize);
  }
  return s;
}

}  // namespace mixgrad::backend::cuda_plan
