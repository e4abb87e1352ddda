#include "mixgrad/amp/scale_loss.hpp"

#include <algorithm>
#include <exception>
#include <iostream>
#include <set>
#include <utility>

#include "amp/frontend_state.hpp"
#include "core/checks.hpp"
#include "hooks/op_hooks.hpp"
#include "mixgrad/amp/autocast.hpp"
#include "mixgrad/amp_step.hpp"
#include "mixgrad/functional.hpp"

namespace mixgrad::amp {

namespace detail {

/// One scope, from scale_loss to its end.
struct ScopeState {
  std::shared_ptr<FrontendState> amp;
  size_t loss_id = 0;
  /// The loss to call backward on.
  Tensor scaled;
  /// False: the loss passes through and the end does nothing (disabled, or
  /// a fixed scale of 1 without master weights).
  bool scaling = false;
  std::vector<const optim::Optimizer*> optimizers;
  /// The optimizers' parameters, each once.
  std::vector<Tensor> params;
  /// (parameter, its gradient when the scope started), for those that had one.
  std::vector<std::pair<Tensor, Tensor>> set_aside;
  bool done = false;
};

}  // namespace detail

namespace {

using detail::FrontendState;
using detail::ScopeState;

constexpr const char* kScaleLoss = "amp::scale_loss";

std::string which_optimizer(size_t i, const optim::Optimizer& opt) {
  return "optimizer " + std::to_string(i) + " (" + opt.name() + ")";
}

// Everything scale_loss refuses, before anything changes.
void check_call(const FrontendState& s, const Tensor& loss, const Optimizers& optimizers, int loss_id) {
  s.check_loss_id(loss_id, kScaleLoss);
  if (optimizers.empty())
    throw ValueError(std::string(kScaleLoss) + ": no optimizer given; pass the optimizers whose parameters the "
                                               "backward of this loss produces gradients for");
  std::set<const optim::Optimizer*> seen;
  for (size_t i = 0; i < optimizers.size(); ++i) {
    const optim::Optimizer& opt = optimizers[i];
    if (!seen.insert(&opt).second)
      throw ValueError(std::string(kScaleLoss) + ": " + which_optimizer(i, opt) + " is listed twice");
    if (!s.saw(opt))
      throw StateError(std::string(kScaleLoss) + ": " + which_optimizer(i, opt) +
                       " was not given to amp::initialize; pass every optimizer of the loop to it");
    if (std::find(s.open.begin(), s.open.end(), &opt) != s.open.end())
      throw StateError(std::string(kScaleLoss) + ": " + which_optimizer(i, opt) +
                       " has a scale_loss scope open already; end that one (its backward) first");
  }
  if (!loss.defined() || !is_floating_point(loss.dtype()))
    throw DTypeError(std::string(kScaleLoss) + ": the loss must be a defined floating tensor, got " +
                     (loss.defined() ? core::describe(loss) : std::string("an undefined tensor")));
}

// apex's `loss.float()`.
Tensor as_float32(const Tensor& loss) {
  return loss.dtype() == DType::float32 ? loss : F::astype(loss, DType::float32);
}

// The optimizers' parameters, each once.
std::vector<Tensor> unique_parameters(const Optimizers& optimizers) {
  std::set<const TensorImpl*> seen;
  std::vector<Tensor> out;
  for (const optim::Optimizer& opt : optimizers)
    for (const Tensor& p : opt.parameters())
      if (seen.insert(p.impl()).second) out.push_back(p);
  return out;
}

// An error a destructor cannot throw: the live state's next call throws it;
// with the handle gone there is no next call, and standard error is all
// that is left.
void keep_error(FrontendState& amp, const std::exception_ptr& error) noexcept {
  if (detail::live_state().get() == &amp) {
    if (!amp.deferred_error) amp.deferred_error = error;
    return;
  }
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    std::cerr << "mixgrad: amp::ScaledLoss ended after its amp::Amp handle and could not finish: " << e.what()
              << "\n";
  } catch (...) {
    std::cerr << "mixgrad: amp::ScaledLoss ended after its amp::Amp handle and could not finish\n";
  }
}

void close(ScopeState& s) noexcept {
  std::vector<const optim::Optimizer*>& open = s.amp->open;
  for (const optim::Optimizer* opt : s.optimizers) open.erase(std::remove(open.begin(), open.end(), opt), open.end());
  s.done = true;
}

// The gradients as they were when the scope started; the scaler untouched.
void put_back(ScopeState& s) {
  for (const Tensor& p : s.params) p.set_grad(Tensor());
  for (const auto& [p, grad] : s.set_aside) p.set_grad(grad);  // the gradient keeps its mark
}

// Ends a scope that is not applied (its body threw, or its end failed).
void abandon(ScopeState& s) noexcept {
  try {
    put_back(s);
  } catch (...) {  // a parameter changed under the scope: tell the next call
    keep_error(*s.amp, std::current_exception());
  }
  close(s);
}

// Refuses a gradient the backward of the scaled loss did not make.
void check_from_scaled_loss(const ScopeState& s, const GradScaler& scaler, const std::vector<Tensor>& fresh) {
  for (size_t i = 0; i < fresh.size(); ++i) {
    const GradScaling mark = grad_scaling(fresh[i].grad());
    if (mark.state == ScaleState::scaled && mark.scaled_by == &scaler) continue;
    throw StateError(std::string(kScaleLoss) + " (loss_id " + std::to_string(s.loss_id) + "): the parameter " +
                     core::describe(fresh[i]) + " has a gradient that did not come from this scope's scaled loss "
                     "(its mark is '" + to_string(mark.state) + "'): call backward on the scope's loss(), the "
                     "callable's argument, with the default upstream gradient; the gradients were put back as "
                     "before the scope");
  }
}

// Adds the gradients set aside at the start to the fresh, unscaled ones. Two
// unscaled gradients sum to an unscaled one that carries either's overflow.
void add_back(ScopeState& s) {
  autodiff::NoRecordScope no_record;
  autocast no_autocast(false);
  for (const auto& [p, old] : s.set_aside) {
    const Tensor fresh = p.grad();
    if (!fresh.defined()) {
      p.set_grad(old);
      continue;
    }
    const GradScaling a = grad_scaling(old), b = grad_scaling(fresh);
    const Tensor sum = F::add(fresh, old);
    p.set_grad(sum);
    if (a.state == ScaleState::unscaled && b.state == ScaleState::unscaled)
      set_grad_scaling(sum, {.found_inf = F::maximum(a.found_inf, b.found_inf), .state = ScaleState::unscaled});
    else
      set_grad_scaling(sum, accumulated_scaling(a, b));
  }
}

// apex's exit of `with amp.scale_loss`: unscale, update, and the gradients
// set aside added back. A throw before the update puts everything back.
void finish_scope(ScopeState& s) {
  if (!s.scaling) {
    close(s);
    return;
  }
  GradScaler& scaler = s.amp->scalers[s.loss_id];
  try {
    std::vector<Tensor> fresh;
    for (const Tensor& p : s.params)
      if (p.grad().defined()) fresh.push_back(p);
    check_from_scaled_loss(s, scaler, fresh);
    if (!fresh.empty()) scaler.unscale(fresh);
    scaler.update();  // no gradient at all: a clean step, as in apex
  } catch (...) {
    abandon(s);
    throw;
  }
  try {
    add_back(s);
  } catch (...) {
    close(s);
    throw;
  }
  close(s);
}

}  // namespace

ScaledLoss scale_loss(const Tensor& loss, const Optimizers& optimizers, int loss_id) {
  std::shared_ptr<FrontendState> amp = detail::live_state();
  if (!amp)
    throw StateError(std::string(kScaleLoss) + ": amp is not initialized; call mg::amp::initialize(models, "
                                               "optimizers, {.opt_level = ...}) first and keep its handle alive");
  amp->throw_deferred(kScaleLoss);
  check_call(*amp, loss, optimizers, loss_id);
  auto s = std::make_unique<ScopeState>();
  s->amp = amp;
  s->loss_id = static_cast<size_t>(loss_id);
  for (const optim::Optimizer& opt : optimizers) s->optimizers.push_back(&opt);
  const Properties& p = amp->properties;
  if (!p.enabled) {
    s->scaled = loss;
  } else if (!p.master_weights.value_or(false) && !p.loss_scale.is_dynamic() && amp->fixed_scales[s->loss_id] == 1.0) {
    s->scaled = as_float32(loss);  // apex's short cut: nothing to unscale, nothing checked
  } else {
    s->scaled = amp->scalers[s->loss_id].scale(as_float32(loss));
    s->scaling = true;
    s->params = unique_parameters(optimizers);
    for (const Tensor& param : s->params) {
      if (!param.grad().defined()) continue;
      s->set_aside.emplace_back(param, param.grad());
      param.set_grad(Tensor());
    }
  }
  for (const optim::Optimizer* opt : s->optimizers) amp->open.push_back(opt);
  return ScaledLoss(std::move(s));
}

ScaledLoss scale_loss(const Tensor& loss, optim::Optimizer& optimizer, int loss_id) {
  return scale_loss(loss, Optimizers{optimizer}, loss_id);
}

ScaledLoss::ScaledLoss(std::unique_ptr<detail::ScopeState> state)
    : state_(std::move(state)), uncaught_(std::uncaught_exceptions()) {}

ScaledLoss::ScaledLoss(ScaledLoss&& other) noexcept : state_(std::move(other.state_)), uncaught_(other.uncaught_) {}

ScaledLoss::~ScaledLoss() {
  if (!state_ || state_->done) return;
  if (std::uncaught_exceptions() > uncaught_) {
    abandon(*state_);
    return;
  }
  try {
    finish_scope(*state_);
  } catch (...) {  // cannot throw here: the next amp call throws it
    keep_error(*state_->amp, std::current_exception());
  }
}

const Tensor& ScaledLoss::loss() const {
  if (finished()) throw StateError("amp::ScaledLoss::loss: the scope has ended; open a new one with scale_loss");
  return state_->scaled;
}

void ScaledLoss::finish() {
  if (finished()) throw StateError("amp::ScaledLoss::finish: the scope has ended already");
  finish_scope(*state_);
}

bool ScaledLoss::finished() const { return !state_ || state_->done; }

}  // namespace mixgrad::amp
