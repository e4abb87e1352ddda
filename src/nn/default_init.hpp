// The default initialisation of Linear and Conv2d, shared by both.
#pragma once

#include <cmath>

#include "hooks/op_hooks.hpp"
#include "mixgrad/nn/init.hpp"

namespace mixgrad::nn::detail {

/// PyTorch's reset_parameters(): weight ~ kaiming_uniform(a = sqrt(5)),
/// which is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the bias (if defined)
/// ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)). Draws from the global generator.
inline void reset_weight_and_bias(const Tensor& weight, const Tensor& bias) {
  autodiff::NoRecordScope no_record;
  init::kaiming_uniform_(weight, {.a = std::sqrt(5.0)});
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::fan_in_and_fan_out(weight.shape()).first));
    init::uniform_(bias, -bound, bound);
  }
}

}  // namespace mixgrad::nn::detail
