// GradScaler: the scale bookkeeping lives here, the fused unscale pass in
// backend/amp.hpp. Every public call validates everything first and only
// then touches gradients or members, so a throw leaves both as they were.
#include "mixgrad/amp/grad_scaler.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "amp/grad_list.hpp"
#include "backend/amp.hpp"
#include "mixgrad/autodiff/grad_manager.hpp"
#include "mixgrad/ops/creation.hpp"
#include "ops/op_support.hpp"

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

// The upstream gradient of one output, multiplied by the scale. Outputs the
// GradManager will reject are passed through for it to say why.
Tensor scaled_dy(const Tensor& y, const Tensor& dy, double scale) {
  if (!y.defined() || !is_floating_point(y.dtype())) return dy;
  if (!dy.defined()) return full_like(y, scale);
  // Formed in y's dtype: the GradManager casts dy to it anyway, and scaling
  // a narrower dy first could overflow where y's dtype would not.
  Tensor out = empty(dy.shape(), y.dtype(), dy.device());
  backend::scale_copy(dy, out, scale);
  return out;
}

}  // namespace

GradScaler::GradScaler() : GradScaler(GradScalerOptions{}) {}

GradScaler::GradScaler(const GradScalerOptions& options) : options_(options), scale_(options.init_scale) {
  validate("GradScaler", options_);
}

GradScaler::GradScaler(double init_scale, double growth_factor, double backoff_factor, int64_t growth_interval)
    : GradScaler(GradScalerOptions{.init_scale = init_scale,
                                   .growth_factor = growth_factor,
                                   .backoff_factor = backoff_factor,
                                   .growth_interval = growth_interval}) {}

void GradScaler::check_not_unscaled(const char* op, const std::vector<Tensor>& tensors) const {
  if (unscaled_.empty()) return;
  for (const Tensor& t : tensors) {
    if (t.defined() && unscaled_.contains(t.id()))
      throw StateError(std::string(op) + ": the gradient of a " + ops::describe(t) +
                       " tensor was already unscaled in this step; call update() before the next backward or "
                       "unscale of it");
  }
}

void GradScaler::backward(autodiff::GradManager& gm, const Tensor& y, const Tensor& dy, bool unscale_grad,
                          UpdateScale update_scale) {
  backward(gm, std::vector<Tensor>{y}, std::vector<Tensor>{dy}, unscale_grad, update_scale);
}

void GradScaler::backward(autodiff::GradManager& gm, const std::vector<Tensor>& ys, const std::vector<Tensor>& dys,
                          bool unscale_grad, UpdateScale update_scale) {
  if (!options_.enabled) {
    gm.backward(ys, dys);
    return;
  }
  if (!dys.empty() && dys.size() != ys.size())
    throw ShapeError("GradScaler::backward: " + std::to_string(ys.size()) + " outputs but " +
                     std::to_string(dys.size()) + " output gradients");
  const std::vector<Tensor> attached = gm.attached_tensors();
  check_not_unscaled("GradScaler::backward", attached);
  std::vector<Tensor> scaled(ys.size());
  for (size_t i = 0; i < ys.size(); ++i) scaled[i] = scaled_dy(ys[i], dys.empty() ? Tensor() : dys[i], scale_);
  gm.backward(ys, scaled);
  if (unscale_grad) unscale(gm.attached_tensors());
  if (update_scale == UpdateScale::always || (update_scale == UpdateScale::if_unscale_grad && unscale_grad)) update();
}

GradScaler& GradScaler::unscale(const std::vector<Tensor>& tensors) {
  if (!options_.enabled) return *this;
  const detail::GradList list = detail::collect_grads("GradScaler::unscale", tensors);
  check_not_unscaled("GradScaler::unscale", list.owners);

  // A new step starts with the first unscale after update().
  bool found = step_open_ && found_non_finite_;
  if (!found) {
    // In range, the reciprocal is a finite, normal number in float and in
    // double: zero gradients stay zero (never 0 * inf = NaN).
    found = backend::scale_and_check(list.grads, 1.0 / scale_);
    for (const Tensor& g : list.grads) g.bump_version();  // written in place
  }

  if (!step_open_) unscaled_.clear();
  step_open_ = true;
  found_non_finite_ = found;
  if (found) {
    for (const auto& [id, weak] : unscaled_)
      if (auto impl = weak.lock()) impl->grad = Tensor();
    for (const Tensor& t : list.owners) t.set_grad(Tensor());
  }
  for (const Tensor& t : list.owners) unscaled_.emplace(t.id(), t.impl_ptr());
  return *this;
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!options_.enabled) return;
  if (new_scale) {
    validate_scale_in_bounds("GradScaler::update", "new_scale", *new_scale, options_);
    scale_ = *new_scale;
  } else if (options_.growth_interval > 0) {
    // The clamps keep the scale in [kMinScaleLimit, kMaxScaleLimit]: the
    // bounds are validated to lie inside it, and a product that leaves it
    // (or double's range) lands on the bound.
    if (step_open_ && found_non_finite_) {
      scale_ = std::max(scale_ * options_.backoff_factor, options_.min_scale.value_or(kMinScaleLimit));
      growth_tracker_ = 0;
    } else if (++growth_tracker_ >= options_.growth_interval) {
      scale_ = std::min(scale_ * options_.growth_factor, options_.max_scale.value_or(kMaxScaleLimit));
      growth_tracker_ = 0;
    }
  }
  step_open_ = false;
  unscaled_.clear();
}

std::map<std::string, double> GradScaler::state_dict() const {
  std::map<std::string, double> state{
      {kScaleFactor, scale_},
      {kGrowthFactor, options_.growth_factor},
      {kBackoffFactor, options_.backoff_factor},
      {kGrowthInterval, static_cast<double>(options_.growth_interval)},
      {kGrowthTracker, static_cast<double>(growth_tracker_)},
  };
  if (options_.min_scale) state[kMinScale] = *options_.min_scale;
  if (options_.max_scale) state[kMaxScale] = *options_.max_scale;
  if (!options_.enabled) state[kEnabled] = 0.0;
  return state;
}

void GradScaler::load_state_dict(const std::map<std::string, double>& state) {
  constexpr const char* op = "GradScaler::load_state_dict";
  static const std::set<std::string> required{kScaleFactor, kGrowthFactor, kBackoffFactor, kGrowthInterval,
                                              kGrowthTracker};
  for (const auto& [key, value] : state)
    require(required.contains(key) || key == kMinScale || key == kMaxScale || key == kEnabled, op,
            "unknown key \"" + key + "\"");
  for (const std::string& key : required) require(state.contains(key), op, "missing key \"" + key + "\"");
  if (state.contains(kEnabled)) {
    const double e = state.at(kEnabled);
    require(e == 0.0 || e == 1.0, op, std::string(kEnabled) + " must be 0 or 1, got " + num(e));
  }

  GradScalerOptions o = options_;
  o.growth_factor = state.at(kGrowthFactor);
  o.backoff_factor = state.at(kBackoffFactor);
  o.growth_interval = integral(op, kGrowthInterval, state.at(kGrowthInterval));
  o.min_scale = state.contains(kMinScale) ? std::optional<double>(state.at(kMinScale)) : std::nullopt;
  o.max_scale = state.contains(kMaxScale) ? std::optional<double>(state.at(kMaxScale)) : std::nullopt;
  o.init_scale = state.at(kScaleFactor);  // validated as the scale to resume from
  validate_scale_in_bounds(op, kScaleFactor, o.init_scale, o);  // so that the message names the key
  validate(op, o);
  const int64_t tracker = integral(op, kGrowthTracker, state.at(kGrowthTracker));
  require(o.growth_interval == 0 ? tracker == 0 : tracker < o.growth_interval, op,
          "_growth_tracker " + std::to_string(tracker) + " does not fit growth_interval " +
              std::to_string(o.growth_interval));

  o.init_scale = options_.init_scale;  // the construction setting, not part of the state
  options_ = o;
  scale_ = state.at(kScaleFactor);
  growth_tracker_ = tracker;
  found_non_finite_ = false;
  step_open_ = false;
  unscaled_.clear();
}

}  // namespace mixgrad::amp
