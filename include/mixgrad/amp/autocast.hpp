// mixgrad/amp/autocast.hpp — automatic mixed precision, MegEngine's way.
//
// Inside autocast, matrix products and convolutions run in a low-precision
// dtype (bfloat16 on the CPU by default, float16 on CUDA), precision-
// sensitive ops (softmax, losses, exp/log, reductions, norms) in float32,
// and elementwise ops in the widest dtype of their inputs. Three ways in:
//
//   { mg::amp::autocast scope;  auto out = net(x); }            // RAII scope
//   auto step = mg::amp::autocast().wrap(train_step);  step(x, y); // wrapper
//   mg::amp::enabled = true;  net(x);  mg::amp::enabled = false; // switch
//
// Scopes nest and restore exactly the state they found, also when an
// exception leaves them; `autocast(false)` inside an enabled region turns
// autocast off there, and ignores any dtype it is given, so one line serves
// both precisions: `mg::amp::autocast scope(use_amp, use_amp ? bf16 : fp32);`.
//
// Two levels of state. `amp::enabled` (with `low_prec_dtype` and
// `high_prec_dtype`) is the process-wide *default*: what a thread with no
// scope open gets. A scope (or a wrapped call) overrides it on its own thread
// while it is open. To ask what applies here and now, whichever set it:
//
//   mg::amp::is_autocast_enabled();   // this thread's effective on/off
//   mg::amp::autocast_dtype();        // ...and the low-precision dtype
//   mg::amp::autocast_dtype(mg::DeviceType::cuda);  // ...for CUDA inputs
//
// The low-precision dtype follows the inputs' device until one is chosen
// (by assigning `low_prec_dtype` or naming one in a scope): bfloat16 for CPU
// inputs, float16 for CUDA inputs, as in PyTorch.
//
// Reading `amp::enabled` inside a scope tells only the default, not whether
// the ops of this thread are being cast.
#pragma once

#include <atomic>
#include <optional>
#include <type_traits>
#include <utility>

#include "mixgrad/device.hpp"
#include "mixgrad/dtype.hpp"

namespace mixgrad::amp {

/// A process-wide setting that any thread may read or assign.
template <class T>
class GlobalSetting {
 public:
  constexpr explicit GlobalSetting(T v) : value_(v) {}
  GlobalSetting& operator=(T v) {
    value_.store(v, std::memory_order_relaxed);
    return *this;
  }
  operator T() const { return value_.load(std::memory_order_relaxed); }  // NOLINT(google-explicit-constructor)
  T load() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<T> value_;
};

/// A process-wide dtype setting whose assignment is checked: a dtype outside
/// the setting's allowed pair throws DTypeError naming the setting and leaves
/// the value as it was, so autocast never runs with a bad dtype. It also
/// knows whether it was ever assigned: an unassigned low-precision setting
/// lets the inputs' device pick the dtype (see default_low_prec_dtype).
class DTypeSetting {
 public:
  enum class Role { low_precision, high_precision };
  constexpr DTypeSetting(Role role, DType v) : role_(role), default_(v), value_(v), is_set_(false) {}
  DTypeSetting& operator=(DType v);  // throws DTypeError for a dtype the role does not allow
  operator DType() const { return value_.load(std::memory_order_relaxed); }  // NOLINT(google-explicit-constructor)
  /// The value: the one assigned, else the default (the CPU's, for low).
  DType load() const { return value_.load(std::memory_order_relaxed); }
  /// True once a dtype was assigned (and until reset()).
  bool is_set() const { return is_set_.load(std::memory_order_relaxed); }
  /// Back to the default, as if never assigned.
  void reset() {
    value_.store(default_, std::memory_order_relaxed);
    is_set_.store(false, std::memory_order_relaxed);
  }

 private:
  Role role_;
  DType default_;
  std::atomic<DType> value_;
  std::atomic<bool> is_set_;
};

/// The low-precision dtype autocast uses for inputs on a device of type `d`
/// when none was chosen: bfloat16 on the CPU (its native 16-bit type, with
/// AVX-512 BF16 and AMX kernels), float16 on CUDA (tensor cores), as PyTorch.
constexpr DType default_low_prec_dtype(DeviceType d) {
  return d == DeviceType::cuda ? DType::float16 : DType::bfloat16;
}

/// The global switch: autocast on for threads that have no scope open.
inline GlobalSetting<bool> enabled{false};
/// Low-precision dtype for scopes that name none. Until assigned (or after
/// reset()), autocast picks default_low_prec_dtype() of the inputs' device
/// (bfloat16 on the CPU, float16 on CUDA) and load() reads bfloat16. Only
/// float16 and bfloat16 may be assigned.
inline DTypeSetting low_prec_dtype{DTypeSetting::Role::low_precision, DType::bfloat16};
/// The high-precision dtype (float32 by default); only float32 and float64
/// may be assigned.
inline DTypeSetting high_prec_dtype{DTypeSetting::Role::high_precision, DType::float32};

/// The state of one thread's autocast: what the current scope says.
struct AutocastState {
  bool enabled = false;
  DType low_prec_dtype = DType::bfloat16;
  DType high_prec_dtype = DType::float32;
  /// True when no low-precision dtype was chosen: the inputs' device picks
  /// it (default_low_prec_dtype) and `low_prec_dtype` holds the CPU's.
  bool low_prec_dtype_by_device = false;

  /// The low-precision dtype for inputs on a device of type `d`.
  constexpr DType low_prec_dtype_for(DeviceType d) const {
    return low_prec_dtype_by_device ? default_low_prec_dtype(d) : low_prec_dtype;
  }
};

/// The state in force on this thread now: the innermost open scope's, or
/// the global defaults when none is open.
AutocastState current_state();

/// True when ops on this thread are autocast now (PyTorch's name): the
/// innermost open scope decides, the global `enabled` only when no scope is
/// open. Not the same as reading `amp::enabled`, which is the default only.
bool is_autocast_enabled();

/// The low-precision dtype in force on this thread now for CPU inputs (the
/// scope's, else the global `low_prec_dtype`, else bfloat16); meaningful
/// when is_autocast_enabled().
DType autocast_dtype();

/// The same for inputs on a device of type `d` (PyTorch's
/// get_autocast_dtype(device_type)): float16 for CUDA unless one was chosen.
DType autocast_dtype(DeviceType d);

/// Whether autocast's weight-cast cache serves this thread (PyTorch's
/// torch.is_autocast_cache_enabled()). On by default: inside the outermost
/// enabled scope a parameter is cast once per dtype (docs/amp.md,
/// "Weight-cast cache").
bool is_autocast_cache_enabled();

/// Turns the weight-cast cache on or off for this thread (PyTorch's
/// torch.set_autocast_cache_enabled): off, every use of a parameter casts
/// it anew, as an unattached tensor is, and the cache is neither read nor
/// filled (nor counted in detail::weight_cache_stats). Casts cached before
/// are kept for the region and served again once it is back on, under the
/// same version and recording checks. For side-by-side measurements and
/// tests of the cache; results are the same either way.
void set_autocast_cache_enabled(bool on);

namespace detail {
/// Counters of the weight-cast cache on this thread (for tests and tuning).
struct WeightCacheStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  /// float32 operands a matrix product read as they are, uncast, where the
  /// CPU has no 16-bit math (docs/amp.md, "On your CPU: time or memory?").
  uint64_t kept_float32 = 0;
};
WeightCacheStats weight_cache_stats();

/// What the floating casts (F::astype between two dtypes, autocast's own
/// casts and their recorded backward included) cost on this thread while a
/// CastTally is alive: how many, how many elements, and the host time they
/// took (on CUDA, the time to launch them).
struct CastCounts {
  uint64_t casts = 0;
  uint64_t elements = 0;
  double seconds = 0.0;
};
/// Counts and times this thread's casts from construction to destruction
/// (for benchmarks; two clock reads per cast while one is alive, none
/// otherwise). Tallies nest: an inner one's counts go to the outer one too.
class [[nodiscard]] CastTally {
 public:
  CastTally();
  ~CastTally();
  CastTally(const CastTally&) = delete;
  CastTally& operator=(const CastTally&) = delete;
  const CastCounts& counts() const { return counts_; }

 private:
  CastCounts counts_;
  CastCounts* outer_;
};

/// What a scope restores when it exits.
struct SavedState {
  AutocastState state;
  bool had_scope;
};
/// Makes `s` this thread's state; returns what to restore.
SavedState enter(const AutocastState& s);
void leave(const SavedState& saved);
}  // namespace detail

class [[nodiscard]] autocast {
 public:
  /// Enters autocast (or, with enabled = false, leaves it) for the scope's
  /// lifetime; the dtypes default to the global settings (an unassigned
  /// low_prec_dtype lets the inputs' device choose). An enabled scope
  /// throws DTypeError for a low_prec_dtype other than float16 / bfloat16 or
  /// a high_prec_dtype other than float32 / float64, before changing any
  /// state. A disabled scope ignores both dtypes (its config() holds the
  /// global settings), so `autocast(false, DType::float32)` is fine.
  explicit autocast(bool enabled = true, std::optional<DType> low_prec_dtype = std::nullopt,
                    std::optional<DType> high_prec_dtype = std::nullopt);
  ~autocast() { detail::leave(saved_); }
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

  /// A callable that runs `f` inside this autocast configuration on every
  /// call, with f's parameters and return type (MegEngine's decorator form).
  /// The returned callable owns a copy of f and of the configuration.
  template <class F>
  auto wrap(F f) const {
    return [config = config_, f = std::move(f)](auto&&... args) -> decltype(auto) {
      struct Restore {
        detail::SavedState saved;
        ~Restore() { detail::leave(saved); }
      } restore{detail::enter(config)};
      return f(std::forward<decltype(args)>(args)...);
    };
  }

  /// The configuration this object stands for.
  const AutocastState& config() const { return config_; }

 private:
  AutocastState config_;
  detail::SavedState saved_;
};

}  // namespace mixgrad::amp
