// The rules a gradient must follow before anything accumulates into it or
// reads it as a parameter's gradient: checked by Tensor::set_grad and again
// by GradManager::backward before it touches any existing gradient.
#pragma once

#include "mixgrad/tensor.hpp"

namespace mixgrad::detail {

/// True when no two elements of `t` share memory (no stride-0 broadcast, no
/// other aliasing view): permutations and narrowings of a contiguous tensor
/// qualify. A sufficient test: with the dims of extent > 1 sorted by stride,
/// each stride exceeds the farthest offset the smaller-stride dims reach.
bool is_non_overlapping(const Tensor& t);

/// Throws, naming `op`: StateError for an undefined `t`, DTypeError unless
/// `t` and `g` are floating, ShapeError unless `g` has `t`'s shape and is
/// non-overlapping, DeviceError unless it is on `t`'s device.
void check_grad(const Tensor& t, const Tensor& g, const char* op);

}  // namespace mixgrad::detail
