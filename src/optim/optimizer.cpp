#include "mixgrad/optim/optimizer.hpp"

#include <charconv>
#include <cmath>
#include <unordered_set>

#include "amp/scaled_grads.hpp"
#include "autodiff/tape.hpp"
#include "backend/copy.hpp"
#include "mixgrad/amp/grad_scaler.hpp"
#include "mixgrad/functional.hpp"
#include "mixgrad/ops/creation.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::optim {

namespace {

// Moments and momentum are kept in float32 for every 16/32-bit parameter:
// accumulating them in half precision would lose the small updates.
DType state_dtype(const Tensor& param) { return param.dtype() == DType::float64 ? DType::float64 : DType::float32; }

bool is_16bit(DType d) { return d == DType::float16 || d == DType::bfloat16; }

constexpr const char* kMaster = "master";

// A float32 copy of `p` (contiguous), unrecorded.
Tensor float32_copy(const Tensor& p) {
  Tensor out = empty(p.shape(), DType::float32, p.device());
  backend::copy(p, out);
  return out;
}

// True when `p` equals the rounding of its master copy to p's dtype: a write
// to the parameter that did not change it (loading the model saved with the
// master copy) leaves the float32 master copy standing. A host read, only
// after the parameter's version changed outside the optimizer.
bool rounds_to(const Tensor& master, const Tensor& p) {
  if (master.shape() != p.shape() || master.device() != p.device()) return false;
  return F::sum(F::ne(F::astype(master, p.dtype()), p)).item<double>() == 0.0;
}

std::string state_key(size_t i, const std::string& what) { return "state." + std::to_string(i) + "." + what; }

// Splits "state.<i>.<rest>" into (i, rest); false for any other form.
bool parse_state_key(const std::string& key, size_t& index, std::string& rest) {
  constexpr std::string_view kPrefix = "state.";
  if (!key.starts_with(kPrefix)) return false;
  const size_t dot = key.find('.', kPrefix.size());
  if (dot == std::string::npos || dot == kPrefix.size()) return false;
  const char* first = key.data() + kPrefix.size();
  const char* last = key.data() + dot;
  auto [ptr, ec] = std::from_chars(first, last, index);
  if (ec != std::errc() || ptr != last) return false;
  rest = key.substr(dot + 1);
  return !rest.empty();
}

}  // namespace

Optimizer::Optimizer(std::vector<Tensor> params, std::string name, bool master_weights, bool amp_scaling)
    : params_(std::move(params)), name_(std::move(name)), master_weights_(master_weights), amp_scaling_(amp_scaling) {
  if (params_.empty()) throw ValueError(name_ + ": got an empty parameter list");
  std::unordered_set<const TensorImpl*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    if (!p.defined()) throw StateError(name_ + ": parameter " + std::to_string(i) + " is undefined");
    if (!is_floating_point(p.dtype()))
      throw DTypeError(name_ + ": parameter " + std::to_string(i) + " must be floating, got " + ops::describe(p));
    if (!seen.insert(p.impl()).second)
      throw ValueError(name_ + ": parameter " + std::to_string(i) + " appears more than once in the parameter list");
  }
  state_.resize(params_.size());
  autodiff::NoRecordScope no_record;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!uses_master(i)) continue;
    state_[i].master = float32_copy(params_[i]);
    state_[i].master_version = params_[i].version();
  }
}

bool Optimizer::uses_master(size_t i) const { return master_weights_ && is_16bit(params_[i].dtype()); }

Tensor Optimizer::master_weight(size_t i) const {
  if (i >= state_.size())
    throw ShapeError(name_ + "::master_weight: parameter " + std::to_string(i) + " of " +
                     std::to_string(state_.size()));
  return uses_master(i) ? state_[i].master : Tensor();
}

Optimizer::~Optimizer() = default;

void Optimizer::require(bool ok, const std::string& what) const {
  if (!ok) throw ValueError(name_ + ": invalid option: " + what);
}

Optimizer& Optimizer::step() {
  check_grads(nullptr);
  step_with(nullptr, Tensor(), Tensor());
  return *this;
}

Optimizer& Optimizer::step(amp::GradScaler& scaler) {
  scaler.step(*this, true);
  return *this;
}

void Optimizer::check_grads(const amp::GradScaler* scaler) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const std::string which = name_ + "::step: parameter " + std::to_string(i) + " " + ops::describe(p);
    if (g.shape() != p.shape()) throw ShapeError(which + " has a gradient of shape " + to_string(g.shape()));
    if (!is_floating_point(g.dtype())) throw DTypeError(which + " has a " + ops::describe(g) + " gradient");
    if (g.device() != p.device()) throw DeviceError(which + " has a gradient on " + to_string(g.device()));
    const amp::detail::GradMark mark = amp::detail::grad_mark(g);
    if (mark.scaled && (scaler == nullptr || mark.scaler != scaler))
      throw StateError(which + " has a gradient that GradScaler::backward scaled and no unscale has unscaled; "
                               "call scaler.unscale(...) or scaler.step(opt) instead of opt.step()");
    if (mark.found_inf.defined() && mark.found_inf.device() != p.device())
      throw DeviceError(which + " has a found-inf flag on " + to_string(mark.found_inf.device()));
  }
}

void Optimizer::step_with(const amp::GradScaler* scaler, const Tensor& inv_scale, const Tensor& found_inf) {
  autodiff::NoRecordScope no_record;
  const std::vector<std::string> names = buffer_names(hyperparameters());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const Tensor g = p.grad();
    if (!g.defined()) continue;  // skipped: state untouched
    amp::detail::GradMark mark = amp::detail::grad_mark(g);
    AmpStep amp_step{.found_inf = std::move(mark.found_inf), .inv_scale = Tensor()};
    if (mark.scaled && scaler != nullptr && mark.scaler == scaler) amp_step = {found_inf, inv_scale};
    ParamState& s = state_[i];
    if (!s.step.defined()) s.step = zeros(Shape{}, DType::int64, p.device());
    if (s.buffers.size() != names.size()) {
      s.buffers.clear();
      for (size_t b = 0; b < names.size(); ++b) s.buffers.push_back(zeros(p.shape(), state_dtype(p), p.device()));
    }
    if (uses_master(i)) {
      // A parameter written outside the optimizer (a loaded model, a cast)
      // is the truth: the master copy follows it.
      if (!s.master.defined() || s.master.shape() != p.shape() || s.master.device() != p.device()) {
        s.master = float32_copy(p);
      } else if (s.master_version != p.version() && !rounds_to(s.master, p)) {
        backend::copy(p, s.master);
      }
    }
    update(p, g, s, amp_step);  // a no-op on the device when the flag is set
    p.bump_version();  // invalidates autocast's cached low-precision copy
    if (uses_master(i)) s.master_version = p.version();
  }
}

Optimizer& Optimizer::clear_grad() {
  for (const Tensor& p : params_) p.set_grad(Tensor());
  return *this;
}

double Optimizer::lr() const { return hyperparameters().at("lr"); }

void Optimizer::set_lr(double lr) {
  require(std::isfinite(lr) && lr >= 0, "lr must be finite and >= 0, got " + std::to_string(lr));
  Hyperparameters h = hyperparameters();
  h.at("lr") = lr;
  check_hyperparameters(h);
  set_hyperparameters(h);
}

int64_t Optimizer::step_count(size_t i) const {
  if (i >= state_.size())
    throw ShapeError(name_ + "::step_count: parameter " + std::to_string(i) + " of " + std::to_string(state_.size()));
  return state_[i].step.defined() ? state_[i].step.item<int64_t>() : 0;
}

StateDict Optimizer::state_dict() const {
  autodiff::NoRecordScope no_record;
  StateDict out;
  const Hyperparameters h = hyperparameters();
  for (const auto& [name, value] : h) out.insert("options." + name, scalar(value, DType::float64));
  const std::vector<std::string> names = buffer_names(h);
  for (size_t i = 0; i < state_.size(); ++i) {
    const ParamState& s = state_[i];
    if (uses_master(i)) {
      const bool current = s.master.defined() && (s.master_version == params_[i].version()
                                                      ? s.master.shape() == params_[i].shape()
                                                      : rounds_to(s.master, params_[i]));
      out.insert(state_key(i, kMaster), current ? s.master.clone() : float32_copy(params_[i]));
    }
    if (!s.step.defined() || s.step.item<int64_t>() == 0) continue;
    out.insert(state_key(i, "step"), s.step.clone());
    for (size_t b = 0; b < names.size() && b < s.buffers.size(); ++b)
      out.insert(state_key(i, names[b]), s.buffers[b].clone());
  }
  return out;
}

// What load_state_dict commits once every check has passed.
struct Optimizer::CheckedLoad {
  Hyperparameters hyperparameters;
  std::vector<std::string> names;
  std::vector<int64_t> steps;  // 0: no state; buffers are copied at commit
};

Optimizer::CheckedLoad Optimizer::check_load(const StateDict& dict) const {
  const std::string where = name_ + "::load_state_dict: ";
  // 1. Hyper-parameters: every current name must be present and valid.
  Hyperparameters h = hyperparameters();
  for (auto& [name, value] : h) {
    const Tensor* t = dict.find("options." + name);
    if (!t) throw ValueError(where + "missing key 'options." + name + "'");
    if (t->numel() != 1) throw ShapeError(where + "'options." + name + "' must hold one value, got " + ops::describe(*t));
    value = t->item<double>();
  }
  check_hyperparameters(h);
  const std::vector<std::string> names = buffer_names(h);

  // 2. Every other key must be a known state entry.
  for (const auto& [key, t] : dict) {
    if (key.starts_with("options.") && h.contains(key.substr(8))) continue;
    size_t i = 0;
    std::string rest;
    bool known = parse_state_key(key, i, rest) && i < params_.size();
    if (known && rest == kMaster) {
      if (!uses_master(i))
        throw ValueError(where + "unexpected key '" + key + "': parameter " + std::to_string(i) + " " +
                         ops::describe(params_[i]) +
                         " has no master copy (master_weights is off or it is not float16 / bfloat16); nothing "
                         "was loaded");
      if (t.shape() != params_[i].shape())
        throw ShapeError(where + "'" + key + "' is " + ops::describe(t) + " but parameter " + std::to_string(i) +
                         " is " + ops::describe(params_[i]));
      if (t.dtype() != DType::float32)
        throw DTypeError(where + "'" + key + "' is " + ops::describe(t) + ", expected float32 for the master copy "
                         "of parameter " + std::to_string(i) + " " + ops::describe(params_[i]));
      continue;
    }
    known = known && dict.contains(state_key(i, "step"));
    if (known && rest != "step") known = std::find(names.begin(), names.end(), rest) != names.end();
    if (!known) throw ValueError(where + "unexpected key '" + key + "'; nothing was loaded");
  }

  // 3. Per-parameter state: a step count >= 1 and every buffer with the
  // parameter's shape and the state dtype.
  std::vector<int64_t> next(params_.size(), 0);
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor* step = dict.find(state_key(i, "step"));
    if (!step) continue;
    if (step->numel() != 1 || is_floating_point(step->dtype()) || step->dtype() == DType::bool_)
      throw DTypeError(where + "'" + state_key(i, "step") + "' must be one integer, got " + ops::describe(*step));
    next[i] = step->item<int64_t>();
    if (next[i] < 1)
      throw ValueError(where + "'" + state_key(i, "step") + "' must be >= 1, got " + std::to_string(next[i]));
    const Tensor& p = params_[i];
    for (const std::string& b : names) {
      const Tensor* t = dict.find(state_key(i, b));
      if (!t) throw ValueError(where + "missing key '" + state_key(i, b) + "'; nothing was loaded");
      if (t->shape() != p.shape())
        throw ShapeError(where + "'" + state_key(i, b) + "' is " + ops::describe(*t) + " but parameter " +
                         std::to_string(i) + " is " + ops::describe(p));
      if (t->dtype() != state_dtype(p))
        throw DTypeError(where + "'" + state_key(i, b) + "' is " + ops::describe(*t) + ", expected " +
                         std::string(to_string(state_dtype(p))) + " for parameter " + std::to_string(i) + " " +
                         ops::describe(p));
    }
  }

  return {std::move(h), names, std::move(next)};
}

void Optimizer::check_state_dict(const StateDict& dict) const { check_load(dict); }

void Optimizer::load_state_dict(const StateDict& dict) {
  auto [h, names, steps] = check_load(dict);
  // 4. Commit: own copies, so the dict and the optimizer do not alias.
  autodiff::NoRecordScope no_record;
  std::vector<ParamState> next(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    if (uses_master(i)) {
      // The loaded master copy is the truth from now on; loading the model
      // of the same checkpoint afterwards writes its rounding, which keeps it
      // (see rounds_to).
      const Tensor* m = dict.find(state_key(i, kMaster));
      next[i].master = m ? float32_copy(m->device() == params_[i].device() ? *m : m->to(params_[i].device()))
                         : float32_copy(params_[i]);
      next[i].master_version = params_[i].version();
    }
    if (steps[i] == 0) continue;
    next[i].step = scalar(static_cast<double>(steps[i]), DType::int64, params_[i].device());
    for (const std::string& b : names) {
      const Tensor& t = dict.at(state_key(i, b));
      next[i].buffers.push_back((t.device() == params_[i].device() ? t : t.to(params_[i].device())).clone());
    }
  }
  set_hyperparameters(h);
  state_ = std::move(next);
}

}  // namespace mixgrad::optim
