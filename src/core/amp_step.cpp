// The per-gradient half of the scaler-optimizer protocol: the mark lives in
// the gradient's own TensorImpl, so it goes away with the gradient and a
// replaced gradient carries none.
#include "mixgrad/amp_step.hpp"

namespace mixgrad {

GradScaling grad_scaling(const Tensor& grad) {
  if (!grad.defined()) return {};
  return {.scaled_by = grad.impl()->scaled_by, .found_inf = grad.impl()->found_inf};
}

void set_grad_scaling(const Tensor& grad, GradScaling scaling) {
  if (!grad.defined()) return;
  grad.impl()->scaled_by = scaling.scaled_by;
  grad.impl()->found_inf = std::move(scaling.found_inf);
}

}  // namespace mixgrad
