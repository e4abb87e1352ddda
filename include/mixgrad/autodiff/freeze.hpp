// mixgrad/autodiff/freeze.hpp — tensors that never get a gradient.
//
// A frozen tensor is left out of every GradManager's work, attached or not:
// a recording does not track it, so no op records a gradient path into it
// and the backward neither computes nor stores its gradient (its `.grad()`
// stays undefined: no gradient memory). An optimizer skips a parameter whose
// gradient is undefined, so a frozen parameter is not updated either (unless
// a gradient is set on it by hand). PyTorch's `p.requires_grad_(False)`;
// Module::freeze() freezes every parameter of a module.
//
//   mg::autodiff::freeze(net.parameters()[0]);   // keep the first weight fixed
//   gm.attach(net.parameters());                 // attaching a frozen tensor is allowed: it gets nothing
//   mg::autodiff::unfreeze(net.parameters()[0]); // the next recording tracks it again
//
// Freezing is a property of the tensor (its storage handle), so a weight
// shared by two modules is frozen in both. It is checked when a recording
// starts: freezing or unfreezing while a GradManager records on this thread
// throws StateError, since the running tape may already track the tensor.
#pragma once

#include <vector>

#include "mixgrad/tensor.hpp"

namespace mixgrad::autodiff {

/// Freezes `tensor` and drops its gradient, which no backward will compute
/// again. Throws StateError, changing nothing, for an undefined tensor or
/// while a GradManager records on this thread.
void freeze(const Tensor& tensor);
/// Freezes every tensor of `tensors`; all are checked before any is frozen.
void freeze(const std::vector<Tensor>& tensors);
/// Makes `tensor` trainable again: the next recording of a GradManager it is
/// attached to tracks it. Throws as freeze() does.
void unfreeze(const Tensor& tensor);
void unfreeze(const std::vector<Tensor>& tensors);
/// True when `tensor` is frozen (false for an undefined tensor).
bool is_frozen(const Tensor& tensor);

}  // namespace mixgrad::autodiff
