// The per-gradient half of the scaler-optimizer protocol: the mark hangs off
// the gradient's own TensorImpl (allocated only when a gradient is marked),
// so it goes away with the gradient and a replaced gradient carries none.
#include "mixgrad/amp_step.hpp"

namespace mixgrad {

const char* to_string(ScaleState state) {
  switch (state) {
    case ScaleState::none: return "not scaled";
    case ScaleState::scaled: return "scaled";
    case ScaleState::unscaled: return "unscaled";
    case ScaleState::unknown: return "of unknown scale";
    case ScaleState::mixed: return "mixed";
  }
  return "?";
}

GradScaling grad_scaling(const Tensor& grad) {
  if (!grad.defined() || !grad.impl()->scaling) return {};
  return *grad.impl()->scaling;
}

void set_grad_scaling(const Tensor& grad, GradScaling scaling) {
  if (!grad.defined()) return;
  // A mark written as {scaled_by, found_inf} alone (the protocol before
  // ScaleState) says what it means by which of the two it sets.
  if (scaling.state == ScaleState::none && scaling.scaled_by != nullptr) scaling.state = ScaleState::scaled;
  if (scaling.state == ScaleState::none && scaling.found_inf.defined()) scaling.state = ScaleState::unscaled;
  std::unique_ptr<GradScaling>& mark = grad.impl()->scaling;
  if (scaling.state == ScaleState::none) {  // the common case pays no allocation
    mark.reset();
    return;
  }
  if (!mark) mark = std::make_unique<GradScaling>();
  mark->scaled_by = scaling.state == ScaleState::scaled ? scaling.scaled_by : nullptr;
  mark->found_inf = scaling.state == ScaleState::unscaled ? std::move(scaling.found_inf) : Tensor();
  mark->state = scaling.state;
  mark->epoch = scaling.state == ScaleState::scaled ? scaling.epoch : 0;
}

GradScaling accumulated_scaling(const GradScaling& have, const GradScaling& incoming) {
  using S = ScaleState;
  const S a = have.state, b = incoming.state;
  if (a == S::none && b == S::none) return have;
  if (a == S::scaled && b == S::scaled && have.scaled_by == incoming.scaled_by && have.epoch == incoming.epoch)
    return have;
  if (a == S::unscaled && b == S::none) return have;
  if ((a == S::unknown && (b == S::none || b == S::unknown)) || (a == S::none && b == S::unknown))
    return {.found_inf = {}, .state = S::unknown};
  return {.found_inf = {}, .state = S::mixed};
}

}  // namespace mixgrad
