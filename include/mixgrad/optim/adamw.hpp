// mixgrad/optim/adamw.hpp — Adam with decoupled weight decay (Loshchilov &
// Hutter, 2019): the decay shrinks the parameter directly instead of being
// added to the gradient, so it is not rescaled by the adaptive denominator.
//
//   mg::optim::AdamW opt(net.parameters(), {.lr = 1e-3, .weight_decay = 0.05});
//
// Per update: p *= 1 - lr * weight_decay, then Adam's step with g = grad.
#pragma once

#include "mixgrad/optim/adam.hpp"

namespace mixgrad::optim {

/// AdamW's options: Adam's, with PyTorch's default weight decay of 0.01.
struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.01;
  bool amsgrad = false;
  /// Keep float32 master copies of float16 / bfloat16 parameters (apex's
  /// O2; see optimizer.hpp).
  bool master_weights = false;
  /// scaler.step(opt) unscales inside the update kernel instead of a
  /// separate pass (PyTorch's `_step_supports_amp_scaling`; see
  /// GradScaler::step): the gradients stay scaled after the step.
  bool step_supports_amp_scaling = false;
};

class AdamW : public Adam {
 public:
  /// Throws ValueError for lr < 0, betas outside [0, 1), eps < 0, weight_decay < 0.
  explicit AdamW(std::vector<Tensor> params, const AdamWOptions& options = {});
  /// Parameter groups, each with `options` where it does not set its own (see
  /// Adam). weight_decay_groups gives the usual split:
  ///   mg::optim::AdamW opt(mg::optim::weight_decay_groups(net.parameters(), 0.1), {.lr = 6e-4});
  explicit AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options = {});
};

}  // namespace mixgrad::optim
