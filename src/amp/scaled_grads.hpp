// What a GradScaler did to a gradient, for the optimizers to read: a
// gradient it scaled (scaler.backward without unscaling) and has not yet
// unscaled, or a gradient it unscaled together with the found-inf flag of
// that step (a one-element float32 tensor on the gradient's device, set to 1
// when the step overflowed). The optimizers pass the flag to their fused
// update kernels, which then change nothing, so a skipped step needs no
// host read; and they refuse still-scaled gradients.
//
//   amp::detail::mark_unscaled(p.grad(), found_inf);   // GradScaler::unscale
//   auto mark = amp::detail::grad_mark(p.grad());      // Optimizer::step
//   if (mark.scaled) throw StateError(...);
//   update(p, g, state, mark.found_inf);
//
// Marks belong to the gradient tensor itself (not the parameter): a
// gradient replaced by set_grad or dropped by clear_grad carries none, and
// an entry goes away with its gradient.
#pragma once

#include "mixgrad/tensor.hpp"

namespace mixgrad::amp::detail {

struct GradMark {
  bool scaled = false;          // scaled by a GradScaler and not unscaled since
  const void* scaler = nullptr;  // the GradScaler that scaled it
  Tensor found_inf;             // the flag of the step that unscaled it; undefined if none
};

/// Marks `grad` as scaled by `scaler` and not yet unscaled (drops any flag
/// it carried).
void mark_scaled(const Tensor& grad, const void* scaler);
/// Marks `grad` as unscaled in the step whose found-inf flag is `found_inf`.
void mark_unscaled(const Tensor& grad, const Tensor& found_inf);
/// The mark of `grad`: none for an undefined or never-marked gradient.
GradMark grad_mark(const Tensor& grad);

}  // namespace mixgrad::amp::detail
