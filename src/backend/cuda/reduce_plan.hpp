// Pure plan of the CUDA reductions (cuda/reduction.cu): which elements of x
// fold into which output, as two strided index spaces, and how the work is
// split into blocks. No CUDA headers; the host tests execute the plan with a
// reference loop and compare with the CPU backend (tests/cuda/test_cuda_plan.cpp).
//
//   const auto p = cuda_plan::make_reduce_plan(x.shape(), x.strides(), axes);
//   // element r of output o sits at x + p.kept.offset(o) + p.reduced.offset(r)
//   // (element strides); outputs are in the row-major order of x's kept dims.
#pragma once

#include <algorithm>
#include <cstdint>

#include "mixgrad/half.hpp"
#include "mixgrad/shape.hpp"

namespace mixgrad::backend::cuda_plan {

/// A row-major product of dimensions with element strides. Trivially
/// copyable: passed to kernels by value.
struct IndexSpace {
  int ndim = 0;
  int64_t extent[Shape::kMaxDims] = {};
  int64_t stride[Shape::kMaxDims] = {};

  /// Element offset of the linear (row-major) index `linear`.
  MIXGRAD_HOST_DEVICE int64_t offset(int64_t linear) const {
    if (ndim == 1) return linear * stride[0];  // the common case: no 64-bit division
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      off += (linear % extent[d]) * stride[d];
      linear /= extent[d];
    }
    return off;
  }
  int64_t count() const {
    int64_t c = 1;
    for (int d = 0; d < ndim; ++d) c *= extent[d];
    return c;
  }
  // Appends a dimension, merged into the last one where the two are
  // contiguous (row-major order, and so every offset, is unchanged).
  void push(int64_t e, int64_t s) {
    if (e == 1) return;
    if (ndim > 0 && stride[ndim - 1] == s * e) {
      extent[ndim - 1] *= e;
      stride[ndim - 1] = s;
      return;
    }
    extent[ndim] = e;
    stride[ndim] = s;
    ++ndim;
  }
};

/// Threads per block of the reduction kernels.
inline constexpr int kReduceThreads = 256;
/// Elements one thread folds, at least, before a reduction is split over
/// more blocks per output.
inline constexpr int64_t kReducePerThread = 16;
/// Most blocks per output (the partial results a second pass combines).
inline constexpr int64_t kMaxSplits = 1024;
/// Outputs from which a column reduction (kept innermost dim contiguous)
/// runs one thread per output and split: neighbouring threads then read
/// neighbouring elements (coalesced), where a block per output would stride
/// through rows.
inline constexpr int64_t kPerThreadOutputs = 1024;
/// Threads a per-thread reduction aims for (splitting the rows), so that a
/// few thousand columns of many rows still fill the device.
inline constexpr int64_t kPerThreadTarget = 65536;

struct ReducePlan {
  IndexSpace kept;     // one output per position, row-major over x's kept dims
  IndexSpace reduced;  // the elements each output folds
  int64_t outputs = 1;
  int64_t count = 1;   // elements per output (0: the identity)
  int64_t splits = 1;  // blocks per output; > 1: a second pass combines the partials
  // One thread folds each (output, split) instead of a block (see
  // kPerThreadOutputs); thread t takes output t % outputs, split t / outputs.
  bool per_thread = false;
};

/// Whether the plan's outputs are many columns, contiguous in memory.
inline bool columns_per_thread(const ReducePlan& p) {
  return p.outputs >= kPerThreadOutputs && p.kept.ndim > 0 && p.kept.stride[p.kept.ndim - 1] == 1;
}

/// Splits of a per-thread plan: enough threads for kPerThreadTarget, each
/// folding at least kReducePerThread elements.
inline int64_t per_thread_splits(int64_t outputs, int64_t count) {
  const int64_t want = std::min<int64_t>((kPerThreadTarget + outputs - 1) / outputs, kMaxSplits);
  const int64_t useful = std::max<int64_t>(1, count / kReducePerThread);
  return std::max<int64_t>(1, std::min(want, useful));
}

/// Blocks per output: 1, or enough for `target_blocks` in all when few
/// outputs have many elements each (at least kReducePerThread per thread).
inline int64_t choose_splits(int64_t outputs, int64_t count, int64_t target_blocks = 1024) {
  if (outputs <= 0 || outputs >= target_blocks || count <= kReduceThreads * kReducePerThread) return 1;
  const int64_t want = std::min<int64_t>((target_blocks + outputs - 1) / outputs, kMaxSplits);
  const int64_t useful = (count + kReduceThreads * kReducePerThread - 1) / (kReduceThreads * kReducePerThread);
  return std::max<int64_t>(1, std::min(want, useful));
}

/// The plan of folding the dimensions of a tensor (shape, element strides)
/// named by the bit mask `axes`. Extent-1 dimensions drop out; neighbours
/// that are contiguous merge. Few outputs with many elements each are
/// split over several blocks, so a reduce-all fills the device.
inline ReducePlan make_reduce_plan(const Shape& shape, const Shape& strides, uint32_t axes,
                                   int64_t target_blocks = 1024) {
  ReducePlan p;
  for (int d = 0; d < shape.ndim(); ++d) {
    if ((axes >> d) & 1u) p.reduced.push(shape[d], strides[d]);
    else p.kept.push(shape[d], strides[d]);
  }
  for (int d = 0; d < shape.ndim(); ++d) {
    if ((axes >> d) & 1u) p.count *= shape[d];
    else p.outputs *= shape[d];
  }
  p.splits = choose_splits(p.outputs, p.count, target_blocks);
  p.per_thread = columns_per_thread(p);
  if (p.per_thread) p.splits = per_thread_splits(p.outputs, p.count);
  return p;
}

/// The plan of sum_channels: a contiguous x viewed as [outer, channels,
/// inner], one output per channel folding its outer * inner elements.
inline ReducePlan make_channel_plan(int64_t outer, int64_t channels, int64_t inner, int64_t target_blocks = 1024) {
  ReducePlan p;
  p.kept.push(channels, inner);
  p.reduced.push(outer, channels * inner);
  p.reduced.push(inner, 1);
  p.outputs = channels;
  p.count = outer * inner;
  p.splits = choose_splits(p.outputs, p.count, target_blocks);
  p.per_thread = columns_per_thread(p);
  if (p.per_thread) p.splits = per_thread_splits(p.outputs, p.count);
  return p;
}

/// The range of reduced indices split `s` of `splits` covers.
MIXGRAD_HOST_DEVICE inline void split_range(int64_t count, int64_t splits, int64_t s, int64_t& begin, int64_t& end) {
  const int64_t chunk = (count + splits - 1) / splits;
  begin = s * chunk < count ? s * chunk : count;
  end = begin + chunk < count ? begin + chunk : count;
}

}  // namespace mixgrad::backend::cuda_plan
