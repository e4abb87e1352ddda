#include "mixgrad/amp/autocast.hpp"

#include <array>
#include <optional>
#include <unordered_map>

#include "hooks/cast_tally.hpp"
#include "hooks/op_hooks.hpp"
#include "mixgrad/cpu.hpp"
#include "mixgrad/ops/shape_ops.hpp"

namespace mixgrad::amp {

namespace {

// Casts of parameters made inside the outermost enabled scope. An entry is
// reused only while the parameter's values (version) and the recording
// state (epoch) are those it was made under: a cast made while nothing
// recorded is not on any tape and must not stand in for one that is. For
// the same reason a cast made inside a no_grad scope (`recorded` false) is
// not reused once recording resumes; a recorded cast may serve inside one.
struct CachedCast {
  std::weak_ptr<TensorImpl> source;
  uint64_t version;
  uint64_t epoch;
  bool recorded;
  Tensor cast;
};

struct ThreadState {
  bool has_scope = false;
  AutocastState state;
  int enabled_depth = 0;  // enabled scopes open on this thread
  std::unordered_map<uint64_t, CachedCast> cache;  // key: id * 8 + dtype
  detail::WeightCacheStats stats;
  bool cache_enabled = true;  // set_autocast_cache_enabled
  detail::CastCounts* cast_tally = nullptr;  // the innermost detail::CastTally alive
  std::array<std::optional<CastPolicy>, kOpCount> policy_override{};  // detail::PolicyOverride
  bool rounded_products = false;                                      // detail::RoundedProducts
};
ThreadState& thread_state() {
  thread_local ThreadState s;
  return s;
}
}  // namespace

namespace {
// The global settings as a state (the dtypes of a scope that names none).
AutocastState global_state(bool on) {
  return {on, low_prec_dtype.load(), high_prec_dtype.load(), !low_prec_dtype.is_set()};
}
}  // namespace

AutocastState current_state() {
  const ThreadState& t = thread_state();
  if (t.has_scope) return t.state;
  return global_state(enabled.load());
}

bool is_autocast_enabled() { return detail::autocast_active(); }

DType autocast_dtype() { return autocast_dtype(DeviceType::cpu); }

DType autocast_dtype(DeviceType d) { return current_state().low_prec_dtype_for(d); }

bool is_autocast_cache_enabled() { return thread_state().cache_enabled; }

void set_autocast_cache_enabled(bool on) { thread_state().cache_enabled = on; }

namespace detail {

SavedState enter(const AutocastState& s) {
  ThreadState& t = thread_state();
  SavedState saved{t.state, t.has_scope};
  t.state = s;
  t.has_scope = true;
  if (s.enabled) ++t.enabled_depth;
  return saved;
}

void leave(const SavedState& saved) {
  ThreadState& t = thread_state();
  if (t.state.enabled && --t.enabled_depth == 0) t.cache.clear();
  t.state = saved.state;
  t.has_scope = saved.had_scope;
}

WeightCacheStats weight_cache_stats() { return thread_state().stats; }

CastTally::CastTally() : outer_(thread_state().cast_tally) { thread_state().cast_tally = &counts_; }

CastTally::~CastTally() {
  thread_state().cast_tally = outer_;
  if (outer_ == nullptr) return;
  outer_->casts += counts_.casts;
  outer_->elements += counts_.elements;
  outer_->seconds += counts_.seconds;
}

namespace {
// The counts of the innermost CastTally alive on this thread, or nullptr.
CastCounts* active_cast_tally() { return thread_state().cast_tally; }
}  // namespace

bool cast_tally_active() { return active_cast_tally() != nullptr; }

void count_cast(uint64_t elements, double seconds) {
  CastCounts* tally = active_cast_tally();
  if (tally == nullptr) return;
  ++tally->casts;
  tally->elements += elements;
  tally->seconds += seconds;
}

namespace {

Tensor cast_weight(ThreadState& t, const Tensor& x, DType target) {
  const bool cacheable =
      t.cache_enabled && t.enabled_depth > 0 && x.dtype() == DType::float32 && autodiff::is_attached(x.id());
  if (!cacheable) return F::astype(x, target);
  const uint64_t key = x.id() * 8 + static_cast<uint64_t>(target);
  const uint64_t epoch = autodiff::detail::recording_epoch();
  const bool recording = autodiff::is_recording();
  auto it = t.cache.find(key);
  if (it != t.cache.end() && it->second.version == x.version() && it->second.epoch == epoch &&
      (it->second.recorded || !recording) && !it->second.source.expired()) {
    ++t.stats.hits;
    return it->second.cast;
  }
  ++t.stats.misses;
  Tensor c = F::astype(x, target);
  t.cache[key] = CachedCast{x.impl_ptr(), x.version(), epoch, recording, c};
  return c;
}

}  // namespace

bool autocast_active() {
  const ThreadState& t = thread_state();
  return t.has_scope ? t.state.enabled : enabled.load();
}

namespace {

bool castable(const Tensor* t) {
  return t->defined() && is_floating_point(t->dtype()) && t->dtype() != DType::float64;
}

// The dtype `op`'s policy casts `inputs` to, or nothing where it keeps them.
// The inputs' device type picks the policy column and the default low
// dtype; inputs on different devices are the op's error to report.
std::optional<DType> cast_target(ThreadState& ts, OpKind op, std::span<Tensor* const> inputs, DeviceType& device) {
  device = DeviceType::cpu;
  for (const Tensor* t : inputs)
    if (t->defined()) {
      device = t->device().type();
      break;
    }
  const CastPolicy p = ts.policy_override[static_cast<std::size_t>(op)].value_or(cast_policy(op, device));
  if (p == CastPolicy::keep) return std::nullopt;
  const AutocastState s = current_state();
  if (p == CastPolicy::low) return s.low_prec_dtype_for(device);
  if (p == CastPolicy::high) return s.high_prec_dtype;
  std::optional<DType> target;  // promote: the widest castable input's dtype
  for (const Tensor* t : inputs)
    if (castable(t)) target = target ? promote_types(*target, t->dtype()) : t->dtype();
  return target;
}

}  // namespace

void cast_inputs(OpKind op, std::span<Tensor* const> inputs) {
  ThreadState& ts = thread_state();
  DeviceType device;
  const std::optional<DType> target = cast_target(ts, op, inputs, device);
  if (!target) return;
  for (Tensor* t : inputs)
    if (castable(t) && t->dtype() != *target) *t = cast_weight(ts, *t, *target);
}

std::optional<DType> cast_product_inputs(OpKind op, std::span<Tensor* const> inputs) {
  ThreadState& ts = thread_state();
  DeviceType device;
  const std::optional<DType> target = cast_target(ts, op, inputs, device);
  if (!target) return std::nullopt;
  const bool widened_anyway = device == DeviceType::cpu && is_low_precision(*target) && !cpu::has_fast_math(*target);
  if (!widened_anyway || ts.rounded_products) {
    cast_inputs(op, inputs);
    return std::nullopt;
  }
  bool kept = false;
  for (Tensor* t : inputs) {
    if (!castable(t) || t->dtype() == *target) continue;
    if (t->dtype() == DType::float32) {
      kept = true;
      ++ts.stats.kept_float32;
    } else {
      *t = cast_weight(ts, *t, *target);
    }
  }
  if (!kept) return std::nullopt;
  return *target;
}

RoundedProducts::RoundedProducts() : saved_(thread_state().rounded_products) { thread_state().rounded_products = true; }

RoundedProducts::~RoundedProducts() { thread_state().rounded_products = saved_; }

PolicyOverride::PolicyOverride(OpKind op, CastPolicy p)
    : op_(op), saved_(thread_state().policy_override[static_cast<std::size_t>(op)]) {
  thread_state().policy_override[static_cast<std::size_t>(op)] = p;
}

AutocastOff::AutocastOff() {
  ThreadState& t = thread_state();
  had_scope_ = t.has_scope;
  was_enabled_ = t.state.enabled;
  if (!t.has_scope) t.state = global_state(false);
  t.has_scope = true;
  t.state.enabled = false;
}

AutocastOff::~AutocastOff() {
  ThreadState& t = thread_state();
  t.has_scope = had_scope_;
  t.state.enabled = was_enabled_;
}

PolicyOverride::~PolicyOverride() { thread_state().policy_override[static_cast<std::size_t>(op_)] = saved_; }

}  // namespace detail

namespace {

bool is_high_precision(DType t) { return t == DType::float32 || t == DType::float64; }

// `what` names the setting: "autocast: low_prec_dtype" or "amp::low_prec_dtype".
void check_low(const char* what, DType t) {
  if (!is_low_precision(t))
    throw DTypeError(std::string(what) + " must be float16 or bfloat16, got " + std::string(to_string(t)));
}
void check_high(const char* what, DType t) {
  if (!is_high_precision(t))
    throw DTypeError(std::string(what) + " must be float32 or float64, got " + std::string(to_string(t)));
}

// A disabled scope casts nothing, so its dtypes are never used: they are
// ignored rather than checked, for `autocast(use_amp, use_amp ? bf16 : fp32)`.
AutocastState checked_config(bool on, std::optional<DType> low, std::optional<DType> high) {
  if (!on) return global_state(false);
  AutocastState c = global_state(true);
  if (low) {
    c.low_prec_dtype = *low;
    c.low_prec_dtype_by_device = false;
  }
  if (high) c.high_prec_dtype = *high;
  check_low("autocast: low_prec_dtype", c.low_prec_dtype);
  check_high("autocast: high_prec_dtype", c.high_prec_dtype);
  return c;
}

}  // namespace

DTypeSetting& DTypeSetting::operator=(DType v) {
  if (role_ == Role::low_precision)
    check_low("amp::low_prec_dtype", v);
  else
    check_high("amp::high_prec_dtype", v);
  value_.store(v, std::memory_order_relaxed);
  is_set_.store(true, std::memory_order_relaxed);
  return *this;
}

// Validation happens before enter(), so a throwing constructor changes nothing.
autocast::autocast(bool on, std::optional<DType> low, std::optional<DType> high)
    : config_(checked_config(on, low, high)), saved_(detail::enter(config_)) {}

}  // namespace mixgrad::amp
