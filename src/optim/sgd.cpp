#include "mixgrad/optim/sgd.hpp"

#include <cmath>

#include "backend/optim.hpp"

namespace mixgrad::optim {

namespace {
SGDOptions from_map(const std::map<std::string, double>& h) {
  return {.lr = h.at("lr"),
          .momentum = h.at("momentum"),
          .dampening = h.at("dampening"),
          .weight_decay = h.at("weight_decay"),
          .nesterov = h.at("nesterov") != 0.0};
}

std::map<std::string, double> to_map(const SGDOptions& o) {
  return {{"lr", o.lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0}};
}
}  // namespace

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options)
    : SGD(std::vector<ParamGroup>{ParamGroup{.params = std::move(params), .options = {}}}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& options)
    : Optimizer(std::move(groups), "SGD", to_map(options), options.master_weights, options.step_supports_amp_scaling) {
  check_groups();
}

SGDOptions SGD::options() const {
  SGDOptions o = from_map(group_hyperparameters(0));
  o.master_weights = master_weights();
  o.step_supports_amp_scaling = step_supports_amp_scaling();
  return o;
}

void SGD::check_hyperparameters(const Hyperparameters& h) const {
  const SGDOptions o = from_map(h);
  require(std::isfinite(o.lr) && o.lr >= 0, "lr must be finite and >= 0, got " + std::to_string(o.lr));
  require(std::isfinite(o.momentum) && o.momentum >= 0, "momentum must be >= 0, got " + std::to_string(o.momentum));
  require(o.dampening >= 0 && o.dampening <= 1, "dampening must be in [0, 1], got " + std::to_string(o.dampening));
  require(std::isfinite(o.weight_decay) && o.weight_decay >= 0,
          "weight_decay must be >= 0, got " + std::to_string(o.weight_decay));
  require(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "nesterov needs momentum > 0 and dampening == 0");
}

std::vector<std::string> SGD::buffer_names(const Hyperparameters& h) const {
  if (h.at("momentum") == 0.0) return {};
  return {"momentum_buffer"};
}

void SGD::update(const Tensor& param, const Tensor& grad, ParamState& state, const AmpStep& amp,
                 const Hyperparameters& h) {
  const SGDOptions o = from_map(h);
  const backend::SgdStep s{.lr = o.lr,
                           .momentum = o.momentum,
                           .dampening = o.dampening,
                           .weight_decay = o.weight_decay,
                           .nesterov = o.nesterov};
  backend::sgd_update(param, grad, state.buffers.empty() ? Tensor() : state.buffers[0], state.step, amp.found_inf, s,
                      {.inv_scale = amp.inv_scale, .master = state.master, .lr = state.lr});
}

}  // namespace mixgrad::optim
