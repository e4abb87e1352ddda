// Pure plans of the CUDA backend's multi-tensor and dropout kernels: which
// tensors go into which launch, which (tensor, offset, length) chunk each
// block of a launch covers, and which Philox counter and word a dropout
// element takes. No CUDA headers and no device needed: the host tests check
// that every element is covered once and that the dropout mapping gives the
// CPU's mask (tests/cuda/test_cuda_multi_plan.cpp).
//
//   std::vector<cuda_plan::TensorRef> refs = ...;          // numel, dtype key, contiguous
//   for (const cuda_plan::MultiLaunch& l : cuda_plan::plan_multi_tensor(refs)) {
//     // l.tensors: indices into refs (one dtype); l.blocks: one chunk per CUDA block
//     // l.first_block: the launch's first block in the whole plan (per-block partials)
//   }
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/dropout.hpp"
#include "mixgrad/half.hpp"

namespace mixgrad::backend::cuda_plan {

/// Elements one CUDA block covers in a multi-tensor launch.
inline constexpr int64_t kChunkElements = int64_t{1} << 16;
/// Tensors one launch's pointer table holds.
inline constexpr int kMaxLaunchTensors = 36;
/// Chunks (blocks) one launch's table holds. With the tensor table this keeps
/// the kernel parameter under the 4 KiB every CUDA version accepts.
inline constexpr int kMaxLaunchBlocks = 320;
/// Threads per block of the multi-tensor kernels.
inline constexpr int kMultiThreads = 512;

/// What the plan needs to know of one tensor of the list.
struct TensorRef {
  int64_t numel = 0;
  int dtype = 0;           // a key: tensors of one launch share it
  bool contiguous = true;  // a strided tensor gets a launch of its own
};

/// One chunk: elements [offset, offset + length) of launch-local tensor `tensor`.
struct Chunk {
  int tensor = 0;
  int64_t offset = 0;
  int64_t length = 0;
};

/// One kernel launch: its tensors (indices into the plan's input, all of one
/// dtype key) and one chunk per block. first_block numbers the launch's
/// blocks within the whole plan, so per-block partial results of all
/// launches land in one array in a fixed order.
struct MultiLaunch {
  std::vector<int> tensors;
  std::vector<Chunk> blocks;
  int64_t first_block = 0;
  bool strided = false;
};

/// Splits a tensor list into launches. Tensors are grouped by dtype key in
/// order of first appearance, each group in list order; empty tensors are
/// skipped; a launch closes when its tensor or block table is full (a tensor
/// may continue in the next launch); a strided tensor is alone in its launch
/// and chunked the same way. Deterministic: the same list gives the same plan.
inline std::vector<MultiLaunch> plan_multi_tensor(const std::vector<TensorRef>& refs,
                                                  int64_t chunk = kChunkElements, int max_tensors = kMaxLaunchTensors,
                                                  int max_blocks = kMaxLaunchBlocks) {
  std::vector<int> keys;
  for (const TensorRef& r : refs)
    if (std::find(keys.begin(), keys.end(), r.dtype) == keys.end()) keys.push_back(r.dtype);
  std::vector<MultiLaunch> out;
  int64_t next_block = 0;
  auto close = [&](MultiLaunch& l) {
    if (l.blocks.empty()) return;
    l.first_block = next_block;
    next_block += static_cast<int64_t>(l.blocks.size());
    out.push_back(std::move(l));
    l = MultiLaunch{};
  };
  for (int key : keys) {
    MultiLaunch cur;
    for (int i = 0; i < static_cast<int>(refs.size()); ++i) {
      const TensorRef& r = refs[static_cast<size_t>(i)];
      if (r.dtype != key || r.numel <= 0) continue;
      if (!r.contiguous) {
        MultiLaunch own;
        own.strided = true;
        own.tensors.push_back(i);
        for (int64_t off = 0; off < r.numel; off += chunk) {
          if (static_cast<int>(own.blocks.size()) == max_blocks) {
            close(own);
            own.strided = true;
            own.tensors.push_back(i);
          }
          own.blocks.push_back({0, off, std::min(chunk, r.numel - off)});
        }
        close(own);
        continue;
      }
      for (int64_t off = 0; off < r.numel; off += chunk) {
        const bool tensor_listed = !cur.tensors.empty() && cur.tensors.back() == i;
        if (static_cast<int>(cur.blocks.size()) == max_blocks ||
            (!tensor_listed && static_cast<int>(cur.tensors.size()) == max_tensors))
          close(cur);
        if (cur.tensors.empty() || cur.tensors.back() != i) cur.tensors.push_back(i);
        cur.blocks.push_back({static_cast<int>(cur.tensors.size()) - 1, off, std::min(chunk, r.numel - off)});
      }
    }
    close(cur);
  }
  return out;
}

/// Blocks of the whole plan (the size of a per-block partial array).
inline int64_t plan_blocks(const std::vector<MultiLaunch>& plan) {
  return plan.empty() ? 0 : plan.back().first_block + static_cast<int64_t>(plan.back().blocks.size());
}

// ---- dropout ------------------------------------------------------------------

/// The elements a dropout thread handles: one Philox block of 4 words,
/// elements [first, first + count) of the row-major order.
struct DropoutSpan {
  int64_t first = 0;
  int count = 0;
};

/// The span of Philox block `block` (0 <= block < DropoutMask::counters(n))
/// of a dropout over n elements: the CUDA kernel's thread for `block` draws
/// counter mask.first + block once and applies word k to element first + k.
MIXGRAD_HOST_DEVICE inline DropoutSpan dropout_span(int64_t block, int64_t n) {
  const int64_t first = block * 4;
  const int64_t left = n - first;
  return {first, static_cast<int>(left < 4 ? left : 4)};
}

/// The keep flags the CUDA kernel computes for block `block`: the same
/// DropoutMask::keep4 the CPU loop calls.
MIXGRAD_HOST_DEVICE inline void dropout_keep(const kernels::DropoutMask& mask, int64_t block, bool keep[4]) {
  mask.keep4(static_cast<uint64_t>(block), keep);
}

}  // namespace mixgrad::backend::cuda_plan
