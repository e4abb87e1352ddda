// mixgrad/optim/adam.hpp — Adam (Kingma & Ba, 2015), with L2 weight decay
// added to the gradient and optional AMSGrad.
//
//   mg::optim::Adam opt(net.parameters(), {.lr = 1e-3, .betas = {0.9, 0.999}});
//   opt.step().clear_grad();
//
// Per parameter, with t its own update count (skipped steps do not count)
// and g = grad + weight_decay * p:
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2              (AMSGrad: v_max = max(v_max, v), used below)
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
#pragma once

#include <utility>

#include "mixgrad/optim/optimizer.hpp"

namespace mixgrad::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
  /// Keep float32 master copies of float16 / bfloat16 parameters (apex's
  /// O2; see optimizer.hpp).
  bool master_weights = false;
  /// scaler.step(opt) unscales inside the update kernel instead of a
  /// separate pass (PyTorch's `_step_supports_amp_scaling`; see
  /// GradScaler::step): the gradients stay scaled after the step.
  bool step_supports_amp_scaling = false;
};

class Adam : public Optimizer {
 public:
  /// Throws ValueError for lr < 0, betas outside [0, 1), eps < 0, weight_decay < 0.
  explicit Adam(std::vector<Tensor> params, const AdamOptions& options = {});
  /// Parameter groups, each with `options` where it does not set its own
  /// ("lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad"; see optimizer.hpp).
  explicit Adam(std::vector<ParamGroup> groups, const AdamOptions& options = {});

  /// The options of group 0 (of the only group, usually).
  AdamOptions options() const;

 protected:
  /// For AdamW: the same state and options with decoupled weight decay.
  Adam(std::vector<ParamGroup> groups, const AdamOptions& options, bool decoupled, std::string name);

  void check_hyperparameters(const Hyperparameters& h) const override;
  std::vector<std::string> buffer_names(const Hyperparameters& h) const override;
  void update(const Tensor& param, const Tensor& grad, ParamState& state, const AmpStep& amp,
              const Hyperparameters& h) override;

 private:
  bool decoupled_;
};

}  // namespace mixgrad::optim
