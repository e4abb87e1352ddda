// The gradients of a list of tensors, gathered once and checked for the
// multi-tensor kernels (GradScaler::unscale, clip_grad_norm): tensors without
// a gradient are left out, a tensor (or a gradient) listed twice counts once.
#pragma once

#include <string_view>
#include <vector>

#include "mixgrad/tensor.hpp"

namespace mixgrad::amp::detail {

struct GradList {
  std::vector<Tensor> owners;  // every tensor with a defined grad, once, in first-seen order
  std::vector<Tensor> grads;   // their gradients, each memory once (shared grads merged)
};

/// Gathers the defined gradients of `tensors` (undefined tensors and tensors
/// without grad are skipped) and validates them for an in-place pass:
/// floating dtype (DTypeError), one device (DeviceError), no zero stride on
/// an extent above one, i.e. no element stored twice (ShapeError). Errors
/// name `op`; nothing is modified.
GradList collect_grads(std::string_view op, const std::vector<Tensor>& tensors);

}  // namespace mixgrad::amp::detail
