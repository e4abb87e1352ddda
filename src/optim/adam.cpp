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

std::map<std::string, double> to_map(const AdamOptions& o) {
  return {{"lr", o.lr},
          {"beta1", o.betas.first},
          {"beta2", o.betas.second},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"amsgrad", o.amsgrad ? 1.0 : 0.0}};
}
}  // namespace

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options)
    : Adam(std::vector<ParamGroup>{ParamGroup{.params = std::move(params), .options = {}}}, options) {}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& options) : Adam(std::move(groups), options, false, "Adam") {}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& options, bool decoupled, std::string name)
    : Optimizer(std::move(groups), std::move(name), to_map(options), options.master_weights,
                options.step_supports_amp_scaling),
      decoupled_(decoupled) {
  check_groups();
}

AdamOptions Adam::options() const {
  AdamOptions o = from_map(group_hyperparameters(0));
  o.master_weights = master_weights();
  o.step_supports_amp_scaling = step_supports_amp_scaling();
  return o;
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

std::vector<std::string> Adam::buffer_names(const Hyperparameters& h) const {
  if (h.at("amsgrad") != 0.0) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

void Adam::update(const Tensor& param, const Tensor& grad, ParamState& state, const AmpStep& amp,
                  const Hyperparameters& h) {
  const AdamOptions o = from_map(h);
  const backend::AdamStep s{.lr = o.lr,
                            .beta1 = o.betas.first,
                            .beta2 = o.betas.second,
                            .eps = o.eps,
                            .weight_decay = o.weight_decay,
                            .decoupled = decoupled_};
  backend::adam_update(param, grad, state.buffers[0], state.buffers[1],
                       state.buffers.size() > 2 ? state.buffers[2] : Tensor(), state.step, amp.found_inf, s,
                       {.inv_scale = amp.inv_scale, .master = state.master, .lr = state.lr});
}

}  // namespace mixgrad::optim
