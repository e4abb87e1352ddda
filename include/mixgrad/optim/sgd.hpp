// mixgrad/optim/sgd.hpp — stochastic gradient descent with optional
// momentum, dampening, Nesterov momentum and L2 weight decay (PyTorch's
// torch.optim.SGD update rule).
//
//   mg::optim::SGD opt(net.parameters(), {.lr = 0.05, .momentum = 0.9});
//   opt.step().clear_grad();
//
// With g = grad + weight_decay * p:
//   buf = g on a parameter's first update, else momentum * buf + (1 - dampening) * g
//   d   = nesterov ? g + momentum * buf : buf        (d = g when momentum == 0)
//   p  -= lr * d
#pragma once

#include "mixgrad/optim/optimizer.hpp"

namespace mixgrad::optim {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  /// Keep float32 master copies of float16 / bfloat16 parameters (apex's
  /// O2; see optimizer.hpp).
  bool master_weights = false;
  /// scaler.step(opt) unscales inside the update kernel instead of a
  /// separate pass (PyTorch's `_step_supports_amp_scaling`; see
  /// GradScaler::step): the gradients stay scaled after the step.
  bool step_supports_amp_scaling = false;
};

class SGD : public Optimizer {
 public:
  /// Throws ValueError for lr < 0, momentum < 0, weight_decay < 0, dampening
  /// outside [0, 1], or nesterov without momentum or with dampening.
  explicit SGD(std::vector<Tensor> params, const SGDOptions& options = {});
  /// Parameter groups, each with `options` where it does not set its own
  /// ("lr", "momentum", "dampening", "weight_decay", "nesterov"; see optimizer.hpp).
  explicit SGD(std::vector<ParamGroup> groups, const SGDOptions& options = {});

  /// The options of group 0 (of the only group, usually).
  SGDOptions options() const;

 protected:
  void check_hyperparameters(const Hyperparameters& h) const override;
  std::vector<std::string> buffer_names(const Hyperparameters& h) const override;
  void update(const Tensor& param, const Tensor& grad, ParamState& state, const AmpStep& amp,
              const Hyperparameters& h) override;
};

}  // namespace mixgrad::optim
