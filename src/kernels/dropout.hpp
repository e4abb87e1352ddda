// The dropout keep mask, shared by the CPU loops (backend/cpu/dropout.cpp)
// and the CUDA kernel (backend/cuda/dropout.cu): a counter-based (Philox) decision per element,
// so the backward regenerates the mask instead of storing it.
//
//   const kernels::DropoutMask mask{seed, first, threshold};
//   bool keep[4];
//   mask.keep4(block, keep);   // elements 4 * block .. 4 * block + 3
#pragma once

#include <cstdint>

#include "kernels/cast.hpp"
#include "kernels/philox.hpp"

namespace mixgrad::kernels {

/// The keep mask of one dropout call. Element i is decided by word i % 4 of
/// the Philox block at counter first + i / 4, so the mask depends only on
/// (seed, first, i): the same on any thread count, and regenerated exactly
/// by the backward instead of being stored.
struct DropoutMask {
  uint64_t seed = 0;
  uint64_t first = 0;
  /// An element is kept when its 32-bit word is >= threshold = round(p 2^32),
  /// which happens with probability 1 - p (to within 2^-32).
  uint64_t threshold = 0;

  /// Counters one call over n elements uses.
  MIXGRAD_HOST_DEVICE static uint64_t counters(int64_t n) { return (static_cast<uint64_t>(n) + 3) / 4; }

  /// Keep flags of elements 4 * block .. 4 * block + 3.
  MIXGRAD_HOST_DEVICE void keep4(uint64_t block, bool keep[4]) const {
    const auto r = philox(seed, first + block);
    for (int k = 0; k < 4; ++k) keep[k] = r[k] >= threshold;
  }
};

}  // namespace mixgrad::kernels
