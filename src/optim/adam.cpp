#include "mixgrad/optim/adam.hpp"

#include <cmath>

#include "backend/optim.hpp"

namespace mixgrad::optim {

namespace {
AdamOptions from_map(const std::map<std::string, double>& h) {
  return {.lr = h.at("lr"),
          .betas = {h.at("beta1"), h.at("beta2")},
          .eps = h.at("eps"),
          .weight_decay = h.at("weight_decay"),
          .amsgrad = h.at("amsgrad") != 0.0};
}
}  // namespace

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options) : Adam(std::move(params), options, false, "Adam") {}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options, bool decoupled, std::string name)
    : Optimizer(std::move(params), std::move(name), options.master_weights, options.step_supports_amp_scaling),
      options_(options),
      decoupled_(decoupled) {
  check_hyperparameters(hyperparameters());
}

Optimizer::Hyperparameters Adam::hyperparameters() const {
  return {{"lr", options_.lr},
          {"beta1", options_.betas.first},
          {"beta2", options_.betas.second},
          {"eps", options_.eps},
          {"weight_decay", options_.weight_decay},
          {"amsgrad", options_.amsgrad ? 1.0 : 0.0}};
}

void Adam::check_hyperparameters(const Hyperparameters& h) const {
  const AdamOptions o = from_map(h);
  require(std::isfinite(o.lr) && o.lr >= 0, "lr must be finite and >= 0, got " + std::to_string(o.lr));
  require(o.betas.first >= 0 && o.betas.first < 1, "betas.first must be in [0, 1), got " + std::to_string(o.betas.first));
  require(o.betas.second >= 0 && o.betas.second < 1,
          "betas.second must be in [0, 1), got " + std::to_string(o.betas.second));
  require(std::isfinite(o.eps) && o.eps >= 0, "eps must be >= 0, got " + std::to_string(o.eps));
  require(std::isfinite(o.weight_decay) && o.weight_decay >= 0,
          "weight_decay must be >= 0, got " + std::to_string(o.weight_decay));
}

void Adam::set_hyperparameters(const Hyperparameters& h) {
  const AdamOptions kept = options_;  // construction settings, not hyper-parameters
  options_ = from_map(h);
  options_.master_weights = kept.master_weights;
  options_.step_supports_amp_scaling = kept.step_supports_amp_scaling;
}

std::vector<std::string> Adam::buffer_names(const Hyperparameters& h) const {
  if (h.at("amsgrad") != 0.0) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

void Adam::update(const Tensor& param, const Tensor& grad, ParamState& state, const AmpStep& amp) {
  const backend::AdamStep s{.lr = options_.lr,
                            .beta1 = options_.betas.first,
                            .beta2 = options_.betas.second,
                            .eps = options_.eps,
                            .weight_decay = options_.weight_decay,
                            .decoupled = decoupled_};
  backend::adam_update(param, grad, state.buffers[0], state.buffers[1],
                       state.buffers.size() > 2 ? state.buffers[2] : Tensor(), state.step, amp.found_inf, s,
                       {.inv_scale = amp.inv_scale, .master = state.master});
}

}  // namespace mixgrad::optim
