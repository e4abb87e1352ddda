// GradScaler: the scale bookkeeping lives here, the fused unscale pass in
// backend/multi_tensor.hpp. Every public call validates everything first and only
// then touches gradients or members, so a throw leaves both as they were.
#include "mixgrad/amp/grad_scaler.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <set>
#include <sstream>

#include "amp/grad_list.hpp"
#include "hooks/op_hooks.hpp"
#include "backend/copy.hpp"
#include "backend/loss_scale.hpp"
#include "backend/multi_tensor.hpp"
#include "kernels/grad_scaling.hpp"
#include "mixgrad/autodiff/grad_manager.hpp"
#include "mixgrad/functional.hpp"
#include "mixgrad/ops/creation.hpp"
#include "core/checks.hpp"

namespace mixgrad::amp {

namespace {

constexpr const char* kScaleFactor = "scale_factor";
constexpr const char* kGrowthFactor = "growth_factor";
constexpr const char* kBackoffFactor = "backoff_factor";
constexpr const char* kGrowthInterval = "growth_interval";
constexpr const char* kGrowthTracker = "_growth_tracker";
constexpr const char* kMinScale = "min_scale";
constexpr const char* kMaxScale = "max_scale";
constexpr const char* kEnabled = "enabled";

std::string num(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

void require(bool ok, const char* op, const std::string& what) {
  if (!ok) throw ValueError(std::string(op) + ": " + what);
}

// A scale whose value and reciprocal are finite, normal float32 numbers.
bool in_limits(double v) { return v >= kMinScaleLimit && v <= kMaxScaleLimit; }

std::string limits_text() { return "[2^-126, 2^126] = [" + num(kMinScaleLimit) + ", " + num(kMaxScaleLimit) + "]"; }

void validate_scale_in_bounds(const char* op, const char* name, double scale, const GradScalerOptions& o) {
  require(in_limits(scale), op,
          std::string(name) + " must be in " + limits_text() +
              " (the scale and its reciprocal must be finite, normal float32 numbers), got " + num(scale));
  require(!o.min_scale || scale >= *o.min_scale, op,
          std::string(name) + " " + num(scale) + " is below min_scale " + num(o.min_scale.value_or(0.0)) +
              (o.min_scale == kDefaultMinScale ? " (the default floor, 2^-14; set min_scale to go lower)" : ""));
  require(!o.max_scale || scale <= *o.max_scale, op,
          std::string(name) + " " + num(scale) + " is above max_scale " + num(o.max_scale.value_or(0.0)));
}

void validate(const char* op, const GradScalerOptions& o) {
  require(std::isfinite(o.growth_factor) && o.growth_factor > 1.0, op,
          "growth_factor must be finite and > 1, got " + num(o.growth_factor));
  require(o.backoff_factor > 0.0 && o.backoff_factor < 1.0, op,
          "backoff_factor must be in (0, 1), got " + num(o.backoff_factor));
  require(o.growth_interval >= 0, op, "growth_interval must be >= 0, got " + std::to_string(o.growth_interval));
  require(!o.min_scale || in_limits(*o.min_scale), op,
          "min_scale must be in " + limits_text() + ", got " + num(o.min_scale.value_or(0.0)));
  require(!o.max_scale || in_limits(*o.max_scale), op,
          "max_scale must be in " + limits_text() + ", got " + num(o.max_scale.value_or(0.0)));
  require(!o.min_scale || !o.max_scale || *o.min_scale <= *o.max_scale, op,
          "min_scale " + num(o.min_scale.value_or(0.0)) + " is above max_scale " + num(o.max_scale.value_or(0.0)));
  validate_scale_in_bounds(op, "init_scale", o.init_scale, o);
}

// An integral value stored as a double (state dicts hold only doubles).
int64_t integral(const char* op, const char* key, double v) {
  require(std::isfinite(v) && v >= 0.0 && v <= 0x1p53 && v == std::floor(v), op,
          std::string(key) + " must be a non-negative integer, got " + num(v));
  return static_cast<int64_t>(v);
}

// The upstream gradient of one output, multiplied by the scale tensor (on
// y's device). Outputs the GradManager will reject are passed through for it
// to say why. The result carries `mark`: the GradManager marks the
// gradients it makes from it as scaled.
Tensor scaled_dy(const Tensor& y, const Tensor& dy, const Tensor& scale, const GradScaling& mark) {
  if (!y.defined() || !is_floating_point(y.dtype())) return dy;
  if (dy.defined() && dy.device() != scale.device()) return dy;
  // Formed in y's dtype: the GradManager casts dy to it anyway, and scaling
  // a narrower dy first could overflow where y's dtype would not.
  Tensor out = empty(dy.defined() ? dy.shape() : y.shape(), y.dtype(), scale.device());
  backend::scale_copy(dy, out, scale);
  set_grad_scaling(out, mark);
  return out;
}

// Epochs of every scaler in the process come from one counter, so a mark
// matches only the scaler and epoch that made it (also after a scaler at the
// same address was destroyed and another built there).
std::atomic<uint64_t> epoch_counter{0};

// Why a gradient with mark `m` cannot be taken by this scaler now, or ""
// when it can. `caller_says_scaled`: an unscale(), whose caller asserts the
// gradients hold the scale (not scaled, of unknown scale are taken);
// `unscaled_ok`: a step, which steps unscaled gradients as they are.
std::string refusal(const GradScaling& m, const void* self, uint64_t epoch, bool caller_says_scaled,
                    bool unscaled_ok) {
  switch (m.state) {
    case ScaleState::scaled:
      if (m.scaled_by != self)
        return "was scaled by another GradScaler; unscale it with that one (or scale the loss with this one)";
      if (m.epoch != epoch)
        return "was scaled before this scaler's last update() or load_state_dict(), and the scale may have "
               "changed since; unscale or step it before calling update()";
      return "";
    case ScaleState::unscaled:
      if (unscaled_ok) return "";
      return "was already unscaled (in an earlier step, as it was not cleared since); clear the gradients "
             "(opt.clear_grad()) before the next backward";
    case ScaleState::mixed:
      return "sums values scaled by a loss scale with values that are not (or scaled by another scale); clear "
             "the gradients (opt.clear_grad()) before the backward of a new step";
    case ScaleState::unknown:
      if (caller_says_scaled) return "";
      return "comes from gm.backward(loss, dy) with a dy you gave, so it may or may not hold the scale; if dy "
             "held the scale (MegEngine's manual gear), call scaler.unscale(...) on these tensors first; or let "
             "the scaler scale: gm.backward(scaler.scale(loss)) or scaler.backward(gm, loss)";
    case ScaleState::none:
      if (caller_says_scaled) return "";
      return "did not come through this scaler (no scaler.backward, no gm.backward(scaler.scale(loss)), no "
             "scaler.unscale in this step), so step() cannot tell whether it holds the scale; scale the loss "
             "with gm.backward(scaler.scale(loss)) or scaler.backward(gm, loss), or if you scaled it by hand, "
             "call scaler.unscale(...) on these tensors first";
  }
  return "";
}

// A one-element value of a state dict, read on the host.
double value_of(const char* op, const StateDict& state, const char* key) {
  const Tensor& t = state.at(key);
  if (t.numel() != 1)
    throw ShapeError(std::string(op) + ": \"" + key + "\" must hold one value, got " + core::describe(t));
  return t.item<double>();
}

}  // namespace

GradScaler::GradScaler() : GradScaler(GradScalerOptions{}) {}

GradScaler::GradScaler(const GradScalerOptions& options) : options_(options), host_scale_(options.init_scale) {
  validate("GradScaler", options_);
  next_epoch();
}

void GradScaler::next_epoch() { epoch_ = ++epoch_counter; }

GradScaling GradScaler::scaled_mark() const {
  return {.scaled_by = this, .found_inf = Tensor(), .state = ScaleState::scaled, .epoch = epoch_};
}

bool GradScaler::scaled_now(const GradScaling& mark) const {
  return mark.state == ScaleState::scaled && mark.scaled_by == this && mark.epoch == epoch_;
}

void GradScaler::check_marks(const char* op, const std::vector<Tensor>& tensors, bool caller_says_scaled) const {
  for (const Tensor& t : tensors) {
    if (!t.defined() || !t.grad().defined()) continue;
    const std::string why = refusal(grad_scaling(t.grad()), this, epoch_, caller_says_scaled, !caller_says_scaled);
    if (!why.empty()) throw StateError(std::string(op) + ": the gradient of a " + core::describe(t) + " tensor " + why);
  }
}

GradScaler::GradScaler(double init_scale, double growth_factor, double backoff_factor, int64_t growth_interval)
    : GradScaler(GradScalerOptions{.init_scale = init_scale,
                                   .growth_factor = growth_factor,
                                   .backoff_factor = backoff_factor,
                                   .growth_interval = growth_interval}) {}

GradScaler::GradScaler(const GradScaler& other) { *this = other; }

GradScaler& GradScaler::operator=(const GradScaler& other) {
  if (this == &other) return *this;
  autodiff::NoRecordScope no_record;
  const auto copy = [](const Tensor& t) { return t.defined() ? t.clone() : Tensor(); };
  options_ = other.options_;
  host_scale_ = other.host_scale_;
  host_tracker_ = other.host_tracker_;
  scale_ = copy(other.scale_);
  inv_scale_ = copy(other.inv_scale_);
  tracker_ = copy(other.tracker_);
  found_inf_ = copy(other.found_inf_);
  step_open_ = other.step_open_;
  step_grads_ = other.step_grads_;
  found_inf_hook_ = other.found_inf_hook_;
  found_inf_synced_ = other.found_inf_synced_;
  next_epoch();  // a copy's marks are its own
  return *this;
}

GradScaler::~GradScaler() = default;

void GradScaler::place_state(Device device) {
  if (scale_.defined()) {
    if (scale_.device() == device) return;
    scale_ = scale_.to(device);
    inv_scale_ = inv_scale_.to(device);
    tracker_ = tracker_.to(device);
    if (found_inf_.defined()) found_inf_ = found_inf_.to(device);
    return;
  }
  scale_ = scalar(host_scale_, DType::float64, device);
  inv_scale_ = scalar(1.0 / host_scale_, DType::float64, device);
  tracker_ = scalar(static_cast<double>(host_tracker_), DType::int64, device);
}

void GradScaler::set_scale(double scale) {
  host_scale_ = scale;
  if (!scale_.defined()) return;
  backend::fill(scale_, scale);
  backend::fill(inv_scale_, 1.0 / scale);
}

double GradScaler::scale_factor() const {
  if (!options_.enabled) return 1.0;
  return scale_.defined() ? scale_.item<double>() : host_scale_;
}

int64_t GradScaler::growth_tracker() const { return tracker_.defined() ? tracker_.item<int64_t>() : host_tracker_; }

bool GradScaler::found_non_finite() const {
  return options_.enabled && found_inf_.defined() && found_inf_.item<float>() != 0.0f;
}

Tensor GradScaler::found_inf() {
  if (!options_.enabled || !found_inf_.defined()) return Tensor();
  sync_found_inf();
  return found_inf_;
}

Tensor GradScaler::scale_tensor() const {
  if (!options_.enabled) return scalar(1.0, DType::float64);
  if (!scale_.defined()) return scalar(host_scale_, DType::float64);
  autodiff::NoRecordScope no_record;
  return scale_.clone();
}

void GradScaler::check_step_state(const char* op, const std::vector<Tensor>& tensors, bool left_scaled_ok) const {
  if (step_grads_.empty()) return;
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
    const auto it = step_grads_.find(t.id());
    if (it == step_grads_.end()) continue;
    if (it->second.state == InStep::unscaled)
      throw StateError(std::string(op) + ": the gradient of a " + core::describe(t) +
                       " tensor was already unscaled in this step; call update() before the next backward or "
                       "unscale of it");
    if (!left_scaled_ok)
      throw StateError(std::string(op) + ": the gradient of a " + core::describe(t) +
                       " tensor was already stepped in this step by an optimizer that unscales inside its update "
                       "(scaler.step(opt)); call update() before the next backward of it");
  }
}

void GradScaler::record_in_step(const Tensor& owner, InStep state) {
  step_grads_.insert_or_assign(owner.id(), StepGrad{owner.impl_ptr(), state});
}

void GradScaler::backward(autodiff::GradManager& gm, const Tensor& y, const Tensor& dy,
                          const ScaledBackwardOptions& options) {
  backward(gm, std::vector<Tensor>{y}, std::vector<Tensor>{dy}, options);
}

void GradScaler::backward(autodiff::GradManager& gm, const std::vector<Tensor>& ys, const std::vector<Tensor>& dys,
                          const ScaledBackwardOptions& options) {
  const autodiff::BackwardOptions gm_options{.create_graph = options.create_graph};
  if (!options_.enabled) {
    gm.backward(ys, dys, gm_options);
    return;
  }
  if (!dys.empty() && dys.size() != ys.size())
    throw ShapeError("GradScaler::backward: " + std::to_string(ys.size()) + " outputs but " +
                     std::to_string(dys.size()) + " output gradients");
  const std::vector<Tensor> attached = gm.attached_tensors();
  // A gradient unscaled earlier in this step and cleared since holds nothing
  // a new backward could be summed with: its tensor starts afresh (the
  // second pass of a gradient penalty).
  for (const Tensor& t : attached)
    if (t.defined() && !t.grad().defined()) step_grads_.erase(t.id());
  check_step_state("GradScaler::backward", attached, false);
  check_addable(attached);
  const auto first = std::find_if(ys.begin(), ys.end(), [](const Tensor& y) { return y.defined(); });
  if (first != ys.end()) place_state(first->device());
  std::vector<Tensor> scaled(ys.size());
  for (size_t i = 0; i < ys.size(); ++i)
    scaled[i] = scale_.defined() ? scaled_dy(ys[i], dys.empty() ? Tensor() : dys[i], scale_, scaled_mark())
                                 : (dys.empty() ? Tensor() : dys[i]);
  gm.backward(ys, scaled, gm_options);
  if (options.unscale_grad && options.create_graph) {
    unscale_recorded(gm.attached_tensors());
  } else if (options.unscale_grad) {
    unscale(gm.attached_tensors());
  }
  // A create_graph backward is a step's first pass: the step ends with the next one.
  const bool step_ends = options.unscale_grad && !options.create_graph;
  if (options.update_scale == UpdateScale::always ||
      (options.update_scale == UpdateScale::if_unscale_grad && step_ends))
    update();
}

void GradScaler::check_addable(const std::vector<Tensor>& attached) const {
  const GradScaling incoming = scaled_mark();
  for (const Tensor& t : attached) {
    if (!t.defined() || !t.grad().defined()) continue;
    const GradScaling have = grad_scaling(t.grad());
    if (accumulated_scaling(have, incoming).state != ScaleState::mixed) continue;
    std::string why = refusal(have, this, epoch_, false, false);
    if (why.empty()) why = std::string("is ") + to_string(have.state);
    throw StateError("GradScaler::backward: the gradient of a " + core::describe(t) +
                     " tensor holds values the scaled gradients must not be added to: it " + why);
  }
}

namespace {

// scale() takes floating losses only.
void check_loss(const Tensor& loss) {
  if (!loss.defined() || !is_floating_point(loss.dtype()))
    throw DTypeError("GradScaler::scale: the loss must be a floating tensor, got " +
                     (loss.defined() ? core::describe(loss) : std::string("an undefined tensor")));
}

}  // namespace

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  check_loss(loss);
  place_state(loss.device());
  Tensor out;
  {
    autodiff::NoRecordScope no_record;  // the factor is a constant of the product
    out = scale_.to(loss.dtype());
  }
  out = F::mul(loss, out);
  set_grad_scaling(out, scaled_mark());
  return out;
}

std::vector<Tensor> GradScaler::scale(const std::vector<Tensor>& losses) {
  if (options_.enabled)
    for (const Tensor& l : losses) check_loss(l);  // all checked before any is scaled
  std::vector<Tensor> out;
  out.reserve(losses.size());
  for (const Tensor& l : losses) out.push_back(scale(l));
  return out;
}

void GradScaler::unscale_recorded(const std::vector<Tensor>& tensors) {
  const detail::GradList list = detail::collect_grads("GradScaler::backward", tensors);
  check_step_state("GradScaler::backward", list.owners, false);
  if (list.owners.empty()) return;
  place_state(list.grads.front().device());
  // Recorded (the manager records on after a create_graph backward): a
  // penalty on the unscaled gradients differentiates through the product.
  // 16-bit gradients are multiplied in float32, as the fused pass does.
  // Computed before any state changes, so a throw leaves the step as it was.
  // The factor is a copy taken now: the product saves it for the penalty's
  // backward, and update() rewrites inv_scale_ in place.
  const Tensor inv64 = inv_scale_.clone(), inv32 = inv_scale_.to(DType::float32);
  std::vector<Tensor> unscaled;
  for (const Tensor& t : list.owners) {
    const Tensor g = t.grad();
    const DType dt = g.dtype();
    const DType compute = dt == DType::float64 ? DType::float64 : DType::float32;
    Tensor u = F::mul(dt == compute ? g : g.to(compute), compute == DType::float64 ? inv64 : inv32);
    if (u.dtype() != dt) u = u.to(dt);
    unscaled.push_back(std::move(u));
  }
  {
    autodiff::NoRecordScope no_record;
    // The scaled gradients stay as the recorded backward made them: the
    // check only reads them, on either device.
    check_into_step([&](const Tensor& found_inf) { backend::non_finite_check(list.grads, found_inf, inv_scale_); });
  }
  for (size_t i = 0; i < list.owners.size(); ++i) {
    list.owners[i].set_grad(unscaled[i]);
    set_grad_scaling(unscaled[i], {.found_inf = found_inf_, .state = ScaleState::unscaled});
    record_in_step(list.owners[i], InStep::unscaled);
  }
}

GradScaler& GradScaler::unscale(const std::vector<Tensor>& tensors) {
  if (!options_.enabled) return *this;
  const detail::GradList list = detail::collect_grads("GradScaler::unscale", tensors);
  check_step_state("GradScaler::unscale", list.owners, true);
  check_marks("GradScaler::unscale", list.owners, true);

  autodiff::NoRecordScope no_record;
  place_state(!list.grads.empty() ? list.grads.front().device()
                                  : scale_.defined() ? scale_.device() : Device::cpu());
  // In range, the reciprocal is a finite, normal number in float and in
  // double: zero gradients stay zero (never 0 * inf = NaN).
  check_into_step([&](const Tensor& found_inf) {
    backend::non_finite_check_and_unscale(list.grads, found_inf, inv_scale_);
  });
  for (const Tensor& g : list.grads) g.bump_version();  // written in place
  for (const Tensor& t : list.owners) {
    set_grad_scaling(t.grad(), {.found_inf = found_inf_, .state = ScaleState::unscaled});
    record_in_step(t, InStep::unscaled);
  }
  return *this;
}

// A new step starts with the first check after update(), with a new flag:
// gradients of earlier steps keep theirs. The flag is committed only after
// `check` returns, so a throw leaves the step as it was.
void GradScaler::check_into_step(const std::function<void(const Tensor& found_inf)>& check) {
  Tensor found_inf = step_open_ ? found_inf_ : zeros(Shape{}, DType::float32, scale_.device());
  check(found_inf);
  if (!step_open_) step_grads_.clear();
  step_open_ = true;
  found_inf_ = std::move(found_inf);
  found_inf_synced_ = false;  // this check may have set it: the hook sees it again
}

GradScaler& GradScaler::set_found_inf_hook(FoundInfHook hook) {
  found_inf_hook_ = std::move(hook);
  return *this;
}

void GradScaler::sync_found_inf() {
  if (!options_.enabled || !found_inf_hook_ || !found_inf_.defined() || found_inf_synced_) return;
  autodiff::NoRecordScope no_record;
  found_inf_hook_(found_inf_);
  found_inf_synced_ = true;
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!options_.enabled) return;
  if (step_open_) sync_found_inf();  // the scale adapts to the flag every rank agrees on
  if (new_scale) {
    validate_scale_in_bounds("GradScaler::update", "new_scale", *new_scale, options_);
    set_scale(*new_scale);
  } else if (options_.growth_interval > 0) {
    // The clamps keep the scale in [kMinScaleLimit, kMaxScaleLimit]: the
    // bounds are validated to lie inside it, and a product that leaves it
    // (or double's range) lands on the bound.
    const backend::ScaleUpdateOptions o{.growth_factor = options_.growth_factor,
                                        .backoff_factor = options_.backoff_factor,
                                        .min_scale = options_.min_scale.value_or(kMinScaleLimit),
                                        .max_scale = options_.max_scale.value_or(kMaxScaleLimit),
                                        .growth_interval = options_.growth_interval};
    if (scale_.defined()) {
      backend::update_scale(scale_, inv_scale_, tracker_, step_open_ ? found_inf_ : Tensor(), o);
    } else {  // no device seen yet, so no unscale either: a clean step
      double inv = 0.0;
      kernels::ScaleUpdate{o.growth_factor, o.backoff_factor, o.min_scale, o.max_scale, o.growth_interval}(
          host_scale_, inv, host_tracker_, false);
    }
  }
  step_open_ = false;
  step_grads_.clear();
  next_epoch();  // what is still scaled now was scaled by a scale that may have changed
}

void GradScaler::step(AmpStepTarget& opt, bool fused_unscale) {
  if (!options_.enabled) {
    opt.step(AmpStep{});
    return;
  }
  // The gradients of opt's parameters this scaler scaled that are still
  // scaled in memory: never checked in this step (pending), or checked and
  // left scaled by an earlier fused step of this step. Another scaler's are
  // left to opt.step(), which refuses them.
  // Gradients this scaler cannot vouch for are refused before anything changes.
  check_marks("GradScaler::step", opt.parameters(), false);
  std::vector<Tensor> pending, still_scaled;
  for (const Tensor& p : opt.parameters()) {
    if (!scaled_now(grad_scaling(p.grad()))) continue;
    still_scaled.push_back(p);
    if (!step_grads_.contains(p.id())) pending.push_back(p);
  }
  if (!fused_unscale || still_scaled.empty()) {
    if (!still_scaled.empty()) unscale(still_scaled);  // in place, once; the step's flag
    sync_found_inf();  // every rank steps on the flag they agree on
    opt.step(AmpStep{});
    return;
  }
  // The unscale happens inside the optimizer's update kernel: here only a
  // read-only pass over the pending gradients sets the step's flag.
  // Everything is checked first, so a throw leaves the gradients, the
  // optimizer and this scaler as they were.
  opt.check_step(AmpStep{.scaler = this, .inv_scale = inv_scale_, .found_inf = Tensor()});
  if (!pending.empty()) {
    const detail::GradList list = detail::collect_grads("GradScaler::step", pending);
    autodiff::NoRecordScope no_record;
    place_state(list.grads.front().device());
    check_into_step([&](const Tensor& found_inf) { backend::non_finite_check(list.grads, found_inf, inv_scale_); });
    // Checked and still scaled: no backward may add to them in this step,
    // and an unscale of them (or a step of another kind) unscales them once.
    for (const Tensor& t : list.owners) record_in_step(t, InStep::left_scaled);
  }
  sync_found_inf();
  opt.step(AmpStep{.scaler = this, .inv_scale = inv_scale_, .found_inf = found_inf_});
}

StateDict GradScaler::state_dict() const {
  autodiff::NoRecordScope no_record;
  StateDict state;
  state.insert(kScaleFactor, scale_.defined() ? scale_.clone() : scalar(host_scale_, DType::float64));
  state.insert(kGrowthFactor, scalar(options_.growth_factor, DType::float64));
  state.insert(kBackoffFactor, scalar(options_.backoff_factor, DType::float64));
  state.insert(kGrowthInterval, scalar(static_cast<double>(options_.growth_interval), DType::int64));
  state.insert(kGrowthTracker,
               tracker_.defined() ? tracker_.clone() : scalar(static_cast<double>(host_tracker_), DType::int64));
  if (options_.min_scale) state.insert(kMinScale, scalar(*options_.min_scale, DType::float64));
  if (options_.max_scale) state.insert(kMaxScale, scalar(*options_.max_scale, DType::float64));
  if (!options_.enabled) state.insert(kEnabled, scalar(0.0, DType::bool_));
  return state;
}

// What load_state_dict commits once every check has passed.
struct GradScaler::Loaded {
  GradScalerOptions options;
  double scale;
  int64_t tracker;
};

GradScaler::Loaded GradScaler::check_load(const StateDict& state) const {
  constexpr const char* op = "GradScaler::load_state_dict";
  static const std::set<std::string> required{kScaleFactor, kGrowthFactor, kBackoffFactor, kGrowthInterval,
                                              kGrowthTracker};
  for (const auto& [key, value] : state)
    require(required.contains(key) || key == kMinScale || key == kMaxScale || key == kEnabled, op,
            "unknown key \"" + key + "\"");
  for (const std::string& key : required) require(state.contains(key), op, "missing key \"" + key + "\"");
  const auto get = [&](const char* key) { return value_of(op, state, key); };
  if (state.contains(kEnabled)) {
    const double e = get(kEnabled);
    require(e == 0.0 || e == 1.0, op, std::string(kEnabled) + " must be 0 or 1, got " + num(e));
  }

  GradScalerOptions o = options_;
  o.growth_factor = get(kGrowthFactor);
  o.backoff_factor = get(kBackoffFactor);
  o.growth_interval = integral(op, kGrowthInterval, get(kGrowthInterval));
  o.min_scale = state.contains(kMinScale) ? std::optional<double>(get(kMinScale)) : std::nullopt;
  o.max_scale = state.contains(kMaxScale) ? std::optional<double>(get(kMaxScale)) : std::nullopt;
  const double scale = get(kScaleFactor);
  o.init_scale = scale;  // validated as the scale to resume from
  validate_scale_in_bounds(op, kScaleFactor, o.init_scale, o);  // so that the message names the key
  validate(op, o);
  const int64_t tracker = integral(op, kGrowthTracker, get(kGrowthTracker));
  require(o.growth_interval == 0 ? tracker == 0 : tracker < o.growth_interval, op,
          "_growth_tracker " + std::to_string(tracker) + " does not fit growth_interval " +
              std::to_string(o.growth_interval));
  o.init_scale = options_.init_scale;  // the construction setting, not part of the state
  return {o, scale, tracker};
}

void GradScaler::check_state_dict(const StateDict& state) const { check_load(state); }

void GradScaler::load_state_dict(const StateDict& state) {
  const Loaded loaded = check_load(state);
  autodiff::NoRecordScope no_record;
  options_ = loaded.options;
  set_scale(loaded.scale);
  host_tracker_ = loaded.tracker;
  if (tracker_.defined()) backend::fill(tracker_, static_cast<double>(loaded.tracker));
  found_inf_ = Tensor();
  step_open_ = false;
  step_grads_.clear();
  next_epoch();
}

}  // namespace mixgrad::amp
