// The order in which a memory format lays out a tensor's dims, outermost
// first: the identity for contiguous tensors, N, the spatial dims, then C for
// the channels-last formats. Shared by the strides of a format
// (core/tensor.cpp) and by the views that see a dense tensor in that order.
//
//   memory_order(4, MemoryFormat::channels_last)   // {0, 2, 3, 1}: N, H, W, C
#pragma once

#include <array>

#include "mixgrad/tensor.hpp"

namespace mixgrad::core {

/// The dims of a rank-`n` tensor from the outermost in memory to the innermost.
inline std::array<int, Shape::kMaxDims> memory_order(int n, MemoryFormat f) {
  std::array<int, Shape::kMaxDims> order{};
  for (int i = 0; i < n; ++i) order[i] = i;
  if (f != MemoryFormat::contiguous) {
    for (int i = 1; i + 1 < n; ++i) order[i] = i + 1;
    order[n - 1] = 1;
  }
  return order;
}

}  // namespace mixgrad::core
