#include "mixgrad/optim/optimizer.hpp"

#include <charconv>
#include <cmath>
#include <functional>
#include <unordered_set>

#include "hooks/op_hooks.hpp"
#include "backend/copy.hpp"
#include "mixgrad/functional.hpp"
#include "mixgrad/ops/creation.hpp"
#include "core/checks.hpp"

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

// "options.<name>" for group 0, "param_groups.<g>.<name>" for the others.
std::string option_key(size_t group, const std::string& name) {
  return group == 0 ? "options." + name : "param_groups." + std::to_string(group) + "." + name;
}

constexpr const char* kGroupSizes = "param_groups.sizes";

// The step counts of a dict's per-parameter state (0: none), each checked
// to be one integer >= 1, with every buffer names_of(i) present, of the
// parameter's shape and the state dtype; throws naming the key otherwise.
std::vector<int64_t> checked_steps(const StateDict& dict, const std::vector<Tensor>& params,
                                   const std::function<std::vector<std::string>(size_t)>& names_of,
                                   const std::string& where) {
  std::vector<int64_t> next(params.size(), 0);
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor* step = dict.find(state_key(i, "step"));
    if (!step) continue;
    if (step->numel() != 1 || is_floating_point(step->dtype()) || step->dtype() == DType::bool_)
      throw DTypeError(where + "'" + state_key(i, "step") + "' must be one integer, got " + core::describe(*step));
    next[i] = step->item<int64_t>();
    if (next[i] < 1)
      throw ValueError(where + "'" + state_key(i, "step") + "' must be >= 1, got " + std::to_string(next[i]));
    const Tensor& p = params[i];
    for (const std::string& b : names_of(i)) {
      const Tensor* t = dict.find(state_key(i, b));
      if (!t) throw ValueError(where + "missing key '" + state_key(i, b) + "'; nothing was loaded");
      if (t->shape() != p.shape())
        throw ShapeError(where + "'" + state_key(i, b) + "' is " + core::describe(*t) + " but parameter " +
                         std::to_string(i) + " is " + core::describe(p));
      if (t->dtype() != state_dtype(p))
        throw DTypeError(where + "'" + state_key(i, b) + "' is " + core::describe(*t) + ", expected " +
                         std::string(to_string(state_dtype(p))) + " for parameter " + std::to_string(i) + " " +
                         core::describe(p));
    }
  }
  return next;
}

}  // namespace

std::vector<ParamGroup> weight_decay_groups(const std::vector<Tensor>& params, double weight_decay) {
  ParamGroup decay{.params = {}, .options = {{"weight_decay", weight_decay}}};
  ParamGroup no_decay{.params = {}, .options = {{"weight_decay", 0.0}}};
  for (const Tensor& p : params) (p.defined() && p.ndim() >= 2 ? decay : no_decay).params.push_back(p);
  return {std::move(decay), std::move(no_decay)};
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, std::string name, const Hyperparameters& defaults,
                     bool master_weights, bool amp_scaling)
    : name_(std::move(name)), master_weights_(master_weights), amp_scaling_(amp_scaling) {
  for (size_t g = 0; g < groups.size(); ++g) {
    Group group{.begin = params_.size(), .end = 0, .hyperparameters = defaults, .lr_source = Tensor()};
    for (const auto& [key, value] : groups[g].options) {
      if (!defaults.contains(key)) {
        std::string known;
        for (const auto& [k, v] : defaults) known += (known.empty() ? "" : ", ") + k;
        throw ValueError(name_ + ": parameter group " + std::to_string(g) + " sets an unknown option '" + key +
                         "' (" + name_ + " takes " + known + ")");
      }
      group.hyperparameters[key] = value;
    }
    for (Tensor& p : groups[g].params) params_.push_back(std::move(p));
    group.end = params_.size();
    groups_.push_back(std::move(group));
  }
  if (params_.empty()) throw ValueError(name_ + ": got an empty parameter list");
  std::unordered_set<const TensorImpl*> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    if (!p.defined()) throw StateError(name_ + ": parameter " + std::to_string(i) + " is undefined");
    if (!is_floating_point(p.dtype()))
      throw DTypeError(name_ + ": parameter " + std::to_string(i) + " must be floating, got " + core::describe(p));
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

void Optimizer::check_groups() const {
  for (size_t g = 0; g < groups_.size(); ++g) {
    try {
      check_hyperparameters(groups_[g].hyperparameters);
    } catch (const ValueError& e) {
      if (groups_.size() == 1) throw;
      throw ValueError(std::string(e.what()) + " (parameter group " + std::to_string(g) + ")");
    }
  }
}

size_t Optimizer::group_index(size_t i) const {
  size_t g = 0;
  while (g + 1 < groups_.size() && i >= groups_[g].end) ++g;
  return g;
}

void Optimizer::check_group_index(size_t group, const char* op) const {
  if (group >= groups_.size())
    throw ValueError(name_ + "::" + op + ": parameter group " + std::to_string(group) + " of " +
                     std::to_string(groups_.size()));
}

std::vector<Tensor> Optimizer::param_group(size_t group) const {
  check_group_index(group, "param_group");
  return {params_.begin() + static_cast<std::ptrdiff_t>(groups_[group].begin),
          params_.begin() + static_cast<std::ptrdiff_t>(groups_[group].end)};
}

double Optimizer::hyperparameter(size_t group, const std::string& name) const {
  check_group_index(group, "hyperparameter");
  if (name == "lr" && groups_[group].lr_source.defined()) return groups_[group].lr_source.item<double>();
  const auto it = groups_[group].hyperparameters.find(name);
  if (it == groups_[group].hyperparameters.end()) throw ValueError(name_ + ": no option '" + name + "'");
  return it->second;
}

void Optimizer::set_hyperparameter(size_t group, const std::string& name, double value) {
  check_group_index(group, "set_hyperparameter");
  Hyperparameters h = groups_[group].hyperparameters;
  const auto it = h.find(name);
  if (it == h.end()) throw ValueError(name_ + ": no option '" + name + "'");
  it->second = value;
  check_hyperparameters(h);
  groups_[group].hyperparameters = std::move(h);
  if (name == "lr") groups_[group].lr_source = Tensor();
}

void Optimizer::set_lr_tensor(size_t group, Tensor lr) {
  check_group_index(group, "set_lr_tensor");
  if (!lr.defined() || lr.numel() != 1 || lr.dtype() != DType::float64)
    throw DTypeError(name_ + "::set_lr_tensor: the lr must be a one-element float64 tensor, got " +
                     (lr.defined() ? core::describe(lr) : std::string("an undefined tensor")));
  groups_[group].lr_source = std::move(lr);
}

Tensor Optimizer::lr_tensor(size_t group) const {
  check_group_index(group, "lr_tensor");
  return groups_[group].lr_source;
}

bool Optimizer::uses_master(size_t i) const { return master_weights_ && is_16bit(params_[i].dtype()); }

Tensor Optimizer::master_weight(size_t i) const {
  if (i >= state_.size())
    throw ShapeError(name_ + "::master_weight: parameter " + std::to_string(i) + " of " +
                     std::to_string(state_.size()));
  return uses_master(i) ? state_[i].master : Tensor();
}

void Optimizer::check_set_master_weights(bool on) const {
  if (on != master_weights_ && stepped_)
    throw StateError(name_ + "::set_master_weights: master weights can only be switched " + (on ? "on" : "off") +
                     " before the first step(), and this optimizer has stepped; build it with {.master_weights = " +
                     (on ? "true" : "false") + "} instead (amp::initialize: call it before training)");
}

Optimizer& Optimizer::set_master_weights(bool on) {
  check_set_master_weights(on);
  if (on == master_weights_) return *this;
  autodiff::NoRecordScope no_record;
  std::vector<Tensor> copies(params_.size());
  for (size_t i = 0; i < params_.size(); ++i)
    if (on && is_16bit(params_[i].dtype())) copies[i] = float32_copy(params_[i]);  // all before any is kept
  for (size_t i = 0; i < params_.size(); ++i) {
    state_[i].master = std::move(copies[i]);
    state_[i].master_version = params_[i].version();
  }
  master_weights_ = on;
  return *this;
}

Optimizer::~Optimizer() = default;

void Optimizer::require(bool ok, const std::string& what) const {
  if (!ok) throw ValueError(name_ + ": invalid option: " + what);
}

void Optimizer::check_step(const AmpStep& amp) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const std::string which = name_ + "::step: parameter " + std::to_string(i) + " " + core::describe(p);
    if (g.shape() != p.shape()) throw ShapeError(which + " has a gradient of shape " + to_string(g.shape()));
    if (!is_floating_point(g.dtype())) throw DTypeError(which + " has a " + core::describe(g) + " gradient");
    if (g.device() != p.device()) throw DeviceError(which + " has a gradient on " + to_string(g.device()));
    const GradScaling mark = grad_scaling(g);
    if (mark.state == ScaleState::mixed)
      throw StateError(which + " has a gradient that sums values scaled by a loss scale with values that are not "
                               "(or scaled by another scale): a scaled backward into a gradient left unscaled, or "
                               "the reverse; call opt.clear_grad() before the backward of a new step");
    if (mark.scaled_by != nullptr && mark.scaled_by != amp.scaler)
      throw StateError(which + " has a gradient that GradScaler::backward scaled and no unscale has unscaled; "
                               "call scaler.unscale(...) or scaler.step(opt) instead of opt.step()");
    if (mark.scaled_by != nullptr && !amp.inv_scale.defined())
      throw StateError(which + " has a gradient still scaled by the step's scaler, and the AmpStep has no "
                               "inv_scale to unscale it with");
    const Tensor& flag = mark.scaled_by != nullptr ? amp.found_inf : mark.found_inf;
    if (flag.defined() && flag.device() != p.device())
      throw DeviceError(which + " has a found-inf flag on " + to_string(flag.device()));
  }
}

AmpStep Optimizer::amp_for(const Tensor& grad, const AmpStep& amp) {
  GradScaling mark = grad_scaling(grad);
  if (mark.scaled_by != nullptr && mark.scaled_by == amp.scaler)
    return {.scaler = nullptr, .inv_scale = amp.inv_scale, .found_inf = amp.found_inf};
  return {.scaler = nullptr, .inv_scale = Tensor(), .found_inf = std::move(mark.found_inf)};
}

void Optimizer::prepare_state(size_t i, const std::vector<std::string>& names) {
  const Tensor& p = params_[i];
  ParamState& s = state_[i];
  const Tensor& lr = groups_[group_index(i)].lr_source;
  s.lr = !lr.defined() || lr.device() == p.device() ? lr : lr.to(p.device());
  if (!s.step.defined()) s.step = zeros(Shape{}, DType::int64, p.device());
  if (s.buffers.size() != names.size()) {
    s.buffers.clear();
    for (size_t b = 0; b < names.size(); ++b) s.buffers.push_back(zeros(p.shape(), state_dtype(p), p.device()));
  }
  if (!uses_master(i)) return;
  // A parameter written outside the optimizer (a loaded model, a cast) is
  // the truth: the master copy follows it.
  if (!s.master.defined() || s.master.shape() != p.shape() || s.master.device() != p.device()) {
    s.master = float32_copy(p);
  } else if (s.master_version != p.version() && !rounds_to(s.master, p)) {
    backend::copy(p, s.master);
  }
}

Optimizer& Optimizer::step(const AmpStep& amp) {
  check_step(amp);
  stepped_ = true;
  autodiff::NoRecordScope no_record;
  for (const Group& group : groups_) {
    const std::vector<std::string> names = buffer_names(group.hyperparameters);
    for (size_t i = group.begin; i < group.end; ++i) {
      const Tensor& p = params_[i];
      const Tensor g = p.grad();
      if (!g.defined()) continue;  // skipped: state untouched
      prepare_state(i, names);
      update(p, g, state_[i], amp_for(g, amp), group.hyperparameters);  // a no-op on the device when the flag is set
      p.bump_version();  // invalidates autocast's cached low-precision copy
      if (uses_master(i)) state_[i].master_version = p.version();
    }
  }
  return *this;
}

Optimizer& Optimizer::clear_grad() {
  for (const Tensor& p : params_) p.set_grad(Tensor());
  return *this;
}

void Optimizer::set_lr(double lr) {
  require(std::isfinite(lr) && lr >= 0, "lr must be finite and >= 0, got " + std::to_string(lr));
  std::vector<Hyperparameters> next;
  for (const Group& g : groups_) {
    next.push_back(g.hyperparameters);
    next.back().at("lr") = lr;
    check_hyperparameters(next.back());
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].hyperparameters = std::move(next[g]);
    groups_[g].lr_source = Tensor();
  }
}

int64_t Optimizer::step_count(size_t i) const {
  if (i >= state_.size())
    throw ShapeError(name_ + "::step_count: parameter " + std::to_string(i) + " of " + std::to_string(state_.size()));
  return state_[i].step.defined() ? state_[i].step.item<int64_t>() : 0;
}

StateDict Optimizer::state_dict() const {
  autodiff::NoRecordScope no_record;
  StateDict out;
  for (size_t g = 0; g < groups_.size(); ++g)
    for (const auto& [name, value] : groups_[g].hyperparameters)
      out.insert(option_key(g, name), scalar(name == "lr" ? lr(g) : value, DType::float64));
  if (groups_.size() > 1) {
    Tensor sizes = empty(Shape{static_cast<int64_t>(groups_.size())}, DType::int64);
    for (size_t g = 0; g < groups_.size(); ++g)
      sizes.data<int64_t>()[g] = static_cast<int64_t>(groups_[g].end - groups_[g].begin);
    out.insert(kGroupSizes, sizes);
  }
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
    const std::vector<std::string> names = buffer_names(groups_[group_index(i)].hyperparameters);
    for (size_t b = 0; b < names.size() && b < s.buffers.size(); ++b)
      out.insert(state_key(i, names[b]), s.buffers[b].clone());
  }
  return out;
}

// What load_state_dict commits once every check has passed.
struct Optimizer::CheckedLoad {
  std::vector<Hyperparameters> hyperparameters;  // per group
  std::vector<int64_t> steps;                    // 0: no state; buffers are copied at commit
};

namespace {

// The group sizes a dict was saved with: "param_groups.sizes", or one group.
std::vector<int64_t> saved_group_sizes(const StateDict& dict, size_t num_params, const std::string& where) {
  const Tensor* t = dict.find(kGroupSizes);
  if (!t) return {static_cast<int64_t>(num_params)};
  if (t->ndim() != 1 || is_floating_point(t->dtype()) || t->dtype() == DType::bool_)
    throw DTypeError(where + "'" + kGroupSizes + "' must be a 1-d integer tensor, got " + core::describe(*t));
  return t->to_vector<int64_t>();
}

std::string sizes_text(const std::vector<int64_t>& sizes) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i) out += (i ? ", " : "") + std::to_string(sizes[i]);
  return out + "]";
}

}  // namespace

Optimizer::CheckedLoad Optimizer::check_load(const StateDict& dict) const {
  const std::string where = name_ + "::load_state_dict: ";
  // 1. The groups must be ours, and every group's hyper-parameters present and valid.
  std::vector<int64_t> ours;
  for (const Group& g : groups_) ours.push_back(static_cast<int64_t>(g.end - g.begin));
  const std::vector<int64_t> saved = saved_group_sizes(dict, params_.size(), where);
  if (saved != ours)
    throw ValueError(where + "the dict's parameter groups have sizes " + sizes_text(saved) + ", this optimizer's " +
                     sizes_text(ours) + "; nothing was loaded");
  std::vector<Hyperparameters> hs;
  for (size_t g = 0; g < groups_.size(); ++g) {
    Hyperparameters h = groups_[g].hyperparameters;
    for (auto& [name, value] : h) {
      const std::string key = option_key(g, name);
      const Tensor* t = dict.find(key);
      if (!t) throw ValueError(where + "missing key '" + key + "'");
      if (t->numel() != 1) throw ShapeError(where + "'" + key + "' must hold one value, got " + core::describe(*t));
      value = t->item<double>();
    }
    check_hyperparameters(h);
    hs.push_back(std::move(h));
  }
  const auto names_of = [&](size_t i) { return buffer_names(hs[group_index(i)]); };

  // 2. Every other key must be a known state entry.
  for (const auto& [key, t] : dict) {
    if (key == kGroupSizes && groups_.size() > 1) continue;
    bool option = false;
    for (size_t g = 0; g < groups_.size() && !option; ++g)
      for (const auto& [name, value] : hs[g]) option = option || key == option_key(g, name);
    if (option) continue;
    size_t i = 0;
    std::string rest;
    bool known = parse_state_key(key, i, rest) && i < params_.size();
    if (known && rest == kMaster) {
      if (!uses_master(i))
        throw ValueError(where + "unexpected key '" + key + "': parameter " + std::to_string(i) + " " +
                         core::describe(params_[i]) +
                         " has no master copy (master_weights is off or it is not float16 / bfloat16); nothing "
                         "was loaded");
      if (t.shape() != params_[i].shape())
        throw ShapeError(where + "'" + key + "' is " + core::describe(t) + " but parameter " + std::to_string(i) +
                         " is " + core::describe(params_[i]));
      if (t.dtype() != DType::float32)
        throw DTypeError(where + "'" + key + "' is " + core::describe(t) + ", expected float32 for the master copy "
                         "of parameter " + std::to_string(i) + " " + core::describe(params_[i]));
      continue;
    }
    known = known && dict.contains(state_key(i, "step"));
    if (known && rest != "step") {
      const std::vector<std::string> names = names_of(i);
      known = std::find(names.begin(), names.end(), rest) != names.end();
    }
    if (!known) throw ValueError(where + "unexpected key '" + key + "'; nothing was loaded");
  }

  // 3. Per-parameter state: a step count >= 1 and every buffer with the
  // parameter's shape and the state dtype.
  std::vector<int64_t> next = checked_steps(dict, params_, names_of, where);

  return {std::move(hs), std::move(next)};
}

void Optimizer::check_state_dict(const StateDict& dict) const { check_load(dict); }

void Optimizer::load_state_dict(const StateDict& dict) {
  auto [hs, steps] = check_load(dict);
  // 4. Commit: own copies, so the dict and the optimizer do not alias.
  autodiff::NoRecordScope no_record;
  std::vector<ParamState> next(params_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::vector<std::string> names = buffer_names(hs[g]);
    for (size_t i = groups_[g].begin; i < groups_[g].end; ++i) {
      if (uses_master(i)) {
        // The loaded master copy is the truth from now on; loading the model
        // of the same checkpoint afterwards writes its rounding, which keeps
        // it (see rounds_to).
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
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].hyperparameters = std::move(hs[g]);
    groups_[g].lr_source = Tensor();
  }
  state_ = std::move(next);
}

}  // namespace mixgrad::optim
