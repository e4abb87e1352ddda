// What the CPU and the CUDA optimizer updates (cpu/optim.cpp, cuda/optim.cu)
// share: the compute type of a parameter's dtype, the visit of the
// parameter's and the gradient's dtypes, and Adam's rule of one step, which
// the CPU forms on the host and CUDA on the device, from the step count it
// reads there.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backend/optim.hpp"
#include "kernels/optim.hpp"

namespace mixgrad::backend::optim_rules {

/// The compute and state type of a parameter of type P: double for float64,
/// float for the others.
template <class P>
using state_t = std::conditional_t<std::is_same_v<P, double>, double, float>;

/// Calls f.template operator()<P, G>() for the parameter's and the
/// gradient's element types.
template <class F>
void visit_param_grad(const Tensor& param, const Tensor& grad, const char* op, F&& f) {
  visit_floating(param.dtype(), op, [&]<class P>() {
    visit_floating(grad.dtype(), op, [&]<class G>() { f.template operator()<P, G>(); });
  });
}

/// Adam's rule for the update after `count` steps. The bias corrections are
/// formed in double: 1 - beta^t loses digits in float for large t.
template <class C>
MIXGRAD_HOST_DEVICE kernels::AdamRule<C> adam_rule(const AdamStep& s, int64_t count) {
  const double t = static_cast<double>(count + 1);
  const double bc1 = 1.0 - std::pow(s.beta1, t);
  const double bc2 = 1.0 - std::pow(s.beta2, t);
  return {.beta1 = C(s.beta1),
          .one_minus_beta1 = C(1.0 - s.beta1),
          .beta2 = C(s.beta2),
          .one_minus_beta2 = C(1.0 - s.beta2),
          .eps = C(s.eps),
          .decay = C(s.decoupled ? 1.0 - s.lr * s.weight_decay : 1.0),
          .l2 = C(s.decoupled ? 0.0 : s.weight_decay),
          .step_size = C(s.lr / bc1),
          .inv_sqrt_bc2 = C(1.0 / std::sqrt(bc2))};
}

}  // namespace mixgrad::backend::optim_rules
