// mixgrad/amp/grad_scaler.hpp — dynamic loss scaling for mixed precision.
//
// Small gradients underflow in float16 / bfloat16. A GradScaler multiplies
// the loss's upstream gradient by the scale, divides the gradients by it
// again ("unscale"), skips a step whose gradients overflowed and adapts the
// scale: x0.5 on overflow, x2 after `growth_interval` clean steps. Two
// gears, as in MegEngine, and PyTorch's recipe:
//
//   mg::amp::GradScaler scaler;                  // 2^4, x2, x0.5, every 2000, floor 2^-14
//   // automatic: scale dy, backward, unscale, update
//   { auto rec = gm.record(); auto loss = ...; scaler.backward(gm, loss); }
//   opt.step().clear_grad();                      // an overflowed step changes nothing
//
//   // manual: accumulate k micro-batches, then unscale and update once
//   for (int i = 0; i < k; ++i) {
//     auto rec = gm.record();
//     scaler.backward(gm, loss_i, {}, {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
//   }
//   scaler.unscale(gm.attached_tensors());       // one fused pass over all grads
//   scaler.update();
//   scaler.step(opt);                            // the optimizer step, skipped on inf / NaN
//
//   // PyTorch's: gm.backward(scaler.scale(loss)); scaler.step(opt); scaler.update();
//
// The scale, growth count and found-inf flag live in one-element tensors on
// the device (the CPU is one), so a step never waits for it; only
// scale_factor(), growth_tracker() and found_non_finite() read them on the
// host. Each gradient carries a mark of how it is scaled
// (mixgrad/amp_step.hpp): the optimizers skip a flagged step in their
// kernels, and refuse a gradient that is still scaled. docs/grad-scaler.md has the
// rules ("Scaled gradients never reach an optimizer by mistake"), the
// scale's range ([2^-126, 2^126], floor 2^-14), a disabled scaler
// (`{.enabled = false}`: a pass-through, so one loop serves float32 and
// mixed precision) and gradient penalties (create_graph); docs/amp.md where
// mixgrad differs from MegEngine and PyTorch.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "mixgrad/amp_step.hpp"
#include "mixgrad/state_dict.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::autodiff {
class GradManager;
struct BackwardOptions;
}

namespace mixgrad::amp {

/// The smallest scale any GradScaler takes: 2^-126, float32's smallest
/// normal number (the scale and its reciprocal stay finite and normal).
inline constexpr double kMinScaleLimit = 0x1p-126;
/// The largest scale any GradScaler takes: 2^126 (larger overflows a float32
/// upstream gradient of one, so every step would be skipped).
inline constexpr double kMaxScaleLimit = 0x1p126;
/// The default min_scale: 2^-14, float16's smallest normal number. A long run
/// of non-finite losses stops the scale there instead of sinking it towards
/// 0, from where it could not recover (docs/grad-scaler.md, "The scale's range").
inline constexpr double kDefaultMinScale = 0x1p-14;

/// Settings of a GradScaler (MegEngine's defaults, plus a floor). Every scale
/// (init_scale, min_scale, max_scale, update's new_scale, a loaded
/// scale_factor) must lie in [kMinScaleLimit, kMaxScaleLimit].
struct GradScalerOptions {
  double init_scale = 16.0;        ///< 2^4; in [min_scale, max_scale]
  double growth_factor = 2.0;      ///< finite, > 1
  double backoff_factor = 0.5;     ///< in (0, 1)
  int64_t growth_interval = 2000;  ///< clean steps per growth; 0: static scale
  /// Backoff never goes below; std::nullopt: only kMinScaleLimit bounds it.
  std::optional<double> min_scale = kDefaultMinScale;
  /// Growth never goes above (>= min_scale); std::nullopt: kMaxScaleLimit.
  std::optional<double> max_scale = std::nullopt;
  /// false: every method passes through (see the overview); the other
  /// settings are still validated and kept for state_dict().
  bool enabled = true;
};

/// When GradScaler::backward calls update(): MegEngine's `update_scale`.
enum class UpdateScale {
  if_unscale_grad,  ///< exactly when it unscales (the default)
  always,
  never,
};

/// Options of GradScaler::backward, MegEngine's keyword arguments:
/// `scaler.backward(gm, loss, {}, {.unscale_grad = false, .update_scale =
/// UpdateScale::never})` is MegEngine's `scaler.backward(gm, loss,
/// unscale_grad=False, update_scale=False)`.
struct ScaledBackwardOptions {
  /// Unscale the attached tensors' gradients after the backward (the
  /// automatic gear); false leaves them scaled (the manual gear).
  bool unscale_grad = true;
  /// When to call update() afterwards.
  UpdateScale update_scale = UpdateScale::if_unscale_grad;
  /// Records the backward and the unscale (see backward()); as
  /// autodiff::BackwardOptions::create_graph.
  bool create_graph = false;
};

class GradScaler {
 public:
  /// The default settings.
  GradScaler();
  /// Throws ValueError for an invalid setting (see GradScalerOptions): a
  /// min_scale / max_scale outside [kMinScaleLimit, kMaxScaleLimit] or an
  /// init_scale outside [min_scale, max_scale].
  explicit GradScaler(const GradScalerOptions& options);
  /// MegEngine's positional form: GradScaler(init_scale, growth_factor,
  /// backoff_factor, growth_interval), with the default min_scale.
  explicit GradScaler(double init_scale, double growth_factor = 2.0, double backoff_factor = 0.5,
                      int64_t growth_interval = 2000);
  /// A copy owns copies of the state tensors: the two scalers evolve apart.
  GradScaler(const GradScaler& other);
  GradScaler& operator=(const GradScaler& other);
  GradScaler(GradScaler&&) noexcept = default;
  GradScaler& operator=(GradScaler&&) noexcept = default;
  ~GradScaler();

  /// The automatic gear: `gm.backward(y, dy * scale)` (dy defaults to ones),
  /// then `unscale(gm.attached_tensors())` if options.unscale_grad (else the
  /// gradients stay scaled, marked as this scaler's), then update() as
  /// options.update_scale says. StateError, before any backward, when an
  /// attached tensor's gradient must not be added to (unscaled, of unknown
  /// scale or another scaler's). With options.create_graph (a gradient
  /// penalty) the backward and the unscale are recorded: the gradients are
  /// replaced by tracked `grad * (1 / scale)`; such a backward opens the step
  /// and does not end it (docs/grad-scaler.md, "Automatic gear").
  void backward(autodiff::GradManager& gm, const Tensor& y, const Tensor& dy = Tensor(),
                const ScaledBackwardOptions& options = {});
  /// As above for several outputs; `dys` is empty or one per output (an
  /// undefined entry stands for ones).
  void backward(autodiff::GradManager& gm, const std::vector<Tensor>& ys, const std::vector<Tensor>& dys = {},
                const ScaledBackwardOptions& options = {});

  /// PyTorch's `scaler.scale(loss)`: `loss * scale`, recorded, marked as
  /// scaled by this scaler, so step(opt) unscales the gradients of
  /// `gm.backward(scaler.scale(loss))` (the automatic gear's parameters, bit
  /// for bit) and a plain opt.step() refuses them. Only the returned tensor
  /// carries the mark (an op on it makes an unmarked one). A disabled scaler
  /// returns loss. DTypeError for an undefined or non-floating loss.
  Tensor scale(const Tensor& loss);
  /// As scale(loss) for each of `losses` (PyTorch scales an iterable).
  std::vector<Tensor> scale(const std::vector<Tensor>& losses);

  /// The current scale: what the loss's upstream gradient is multiplied by
  /// (1 for a disabled scaler). Reads the scale tensor: a synchronisation.
  double scale_factor() const;

  /// False for a scaler constructed with `enabled = false`.
  bool is_enabled() const { return options_.enabled; }

  /// Divides the gradients of `tensors` (those without one are skipped) by
  /// the scale in one fused pass on their device and sets the step's
  /// found-inf flag when a value is or becomes inf / NaN; each unscaled
  /// gradient is marked with the flag, so optimizers skip the step if it is
  /// set. The first unscale after update() opens a step with a clear flag.
  /// Takes gradients this scaler scaled since the last update() and those
  /// the caller says are scaled (a dy scaled by hand, unmarked); StateError
  /// for gradients already unscaled, another scaler's or an earlier epoch's,
  /// and mixed ones; DTypeError / DeviceError / ShapeError for gradients the
  /// pass cannot take. A throw changes nothing. Returns *this.
  GradScaler& unscale(const std::vector<Tensor>& tensors);

  /// True when an unscale of the current step found inf or NaN. update()
  /// ends the step but keeps this readable (for step()) until the first
  /// unscale of the next step. Reads the flag tensor: a synchronisation.
  bool found_non_finite() const;

  /// The step's found-inf flag where it lives (0-d float32, 0 or 1, on the
  /// scale's device), after the hook (sync_found_inf runs first): for code
  /// that acts on it without a host read, as LRScheduler::step(scaler) does.
  /// An undefined tensor before the first unscale and for a disabled scaler.
  /// The next step's first unscale starts a new flag tensor; this one keeps
  /// its value.
  Tensor found_inf();
  /// The current scale as a new 0-d float64 tensor on the scale's device (on
  /// the CPU before the scaler has seen a device; 1 when disabled), copied
  /// there: no synchronisation.
  Tensor scale_tensor() const;

  /// Ends the step and adapts the scale on its device: `new_scale` sets it
  /// exactly (ValueError, nothing changed, outside [min_scale, max_scale]);
  /// otherwise an overflowed step multiplies it by backoff_factor (not below
  /// min_scale) and restarts the count, and growth_interval clean steps
  /// multiply it by growth_factor (not above max_scale). growth_interval == 0
  /// keeps it static.
  void update(std::optional<double> new_scale = std::nullopt);

  /// The optimizer step: the gradients of opt's parameters that this scaler
  /// scaled and nothing has unscaled yet are unscaled, and opt's kernels
  /// skip the update when the step's flag is set (parameters, state and step
  /// counts unchanged). By default they are unscaled in place, then
  /// `opt.step()` runs; an optimizer with `step_supports_amp_scaling`
  /// (PyTorch's `_step_supports_amp_scaling`) multiplies by 1 / scale inside
  /// its update instead, leaving the gradients scaled in memory
  /// (docs/apex.md, "The unscale inside the optimizer"). No synchronisation.
  /// StateError, before anything changes, for gradients step() cannot tell
  /// the scale of: not from this scaler (unscale() them first), scaled
  /// before the last update(), mixed. A disabled scaler just steps.
  void step(AmpStepTarget& opt) { step(opt, opt.step_supports_amp_scaling()); }
  /// As step(opt), with the unscale fused into opt's update or not, whatever
  /// opt's step_supports_amp_scaling() says (`opt.step(scaler)` asks for
  /// the fused form).
  void step(AmpStepTarget& opt, bool fused_unscale);
  /// For any other optimizer type (one with a `step()` that cannot read the
  /// flag): calls `opt.step()` unless found_non_finite(), which reads the
  /// flag on the host, a synchronisation.
  template <class Optimizer>
    requires(!std::derived_from<Optimizer, AmpStepTarget>)
  void step(Optimizer& opt) {
    sync_found_inf();
    if (!found_non_finite()) opt.step();
  }

  /// Sees the step's found-inf flag (0-d float32, 0 or 1, on the scale's
  /// device) and may change it in place, e.g. to agree with other processes.
  using FoundInfHook = std::function<void(const Tensor& found_inf)>;
  /// Installs `hook` (an empty function removes it). It runs once per step,
  /// after the step's last unscale and before the flag is read (at the start
  /// of step(opt) or update()), and must write 0 or 1 into the flag in
  /// place. Data parallel installs an all-reduce (max) here
  /// (distributed::sync_grad_scaler), so all ranks skip the same steps.
  /// Returns *this.
  GradScaler& set_found_inf_hook(FoundInfHook hook);
  /// Runs the hook now if the flag of the current step has not been through
  /// it yet (nothing without a hook, before the first unscale, or when
  /// disabled). step(), update() call it; call it yourself only before
  /// reading the flag by other means.
  void sync_found_inf();

  /// MegEngine's keys, as 0-d tensors: "scale_factor", "growth_factor",
  /// "backoff_factor" (float64), "growth_interval", "_growth_tracker"
  /// (int64); "min_scale" / "max_scale" when set; "enabled" (false) for a
  /// disabled scaler. Copies on the device: no synchronisation.
  StateDict state_dict() const;
  /// Restores a state_dict() (one-element tensors of any numeric dtype, read
  /// on the host). Unknown or missing keys and invalid values throw
  /// ValueError (ShapeError for a tensor of several elements) and load
  /// nothing; a dict without "min_scale" (MegEngine's) loads as having none.
  /// A load starts a fresh step, and never switches the scaler on or off.
  void load_state_dict(const StateDict& state);
  /// The checks of load_state_dict alone: throws what it would throw and
  /// changes nothing.
  void check_state_dict(const StateDict& state) const;

  const GradScalerOptions& options() const { return options_; }
  /// Clean steps counted towards the next growth. Reads the count tensor: a
  /// synchronisation.
  int64_t growth_tracker() const;

 private:
  struct Loaded;
  Loaded check_load(const StateDict& state) const;
  // What the step did to a gradient so far, as it is in memory.
  enum class InStep : uint8_t {
    unscaled,     // unscaled in place (or replaced by its recorded unscale)
    left_scaled,  // checked, then left scaled for an optimizer that unscales in its update
  };
  // Refuses a gradient the step has unscaled, and one left scaled unless
  // `left_scaled_ok` (an unscale may still unscale those, once).
  void check_step_state(const char* op, const std::vector<Tensor>& tensors, bool left_scaled_ok) const;
  // How this scaler marks what it scales now.
  GradScaling scaled_mark() const;
  // True for a mark of this scaler in its current epoch.
  bool scaled_now(const GradScaling& mark) const;
  // Refuses (StateError, naming `op` and `fix`) a gradient whose mark says
  // it cannot be unscaled now: unscaled, scaled by another scaler or in an
  // earlier epoch, mixed; and, unless `caller_says_scaled`, not scaled or
  // of unknown scale.
  void check_marks(const char* op, const std::vector<Tensor>& tensors, bool caller_says_scaled) const;
  // A new epoch: marks of earlier ones no longer count as this scaler's.
  void next_epoch();
  // Refuses (StateError) an attached tensor's gradient that scaled values
  // must not be added to, before a scaled backward.
  void check_addable(const std::vector<Tensor>& attached) const;
  void record_in_step(const Tensor& owner, InStep state);
  // create_graph's unscale: recorded, out of place (see backward).
  void unscale_recorded(const std::vector<Tensor>& tensors);
  // Creates the state tensors on `device`, or moves them there.
  void place_state(Device device);
  // Runs `check` on the step's found-inf flag (a fresh one when no step is
  // open: a new step starts here) and opens the step with it.
  void check_into_step(const std::function<void(const Tensor& found_inf)>& check);
  // Sets the scale (and its reciprocal) from the host.
  void set_scale(double scale);

  GradScalerOptions options_;
  // Until the first device is seen, the state is kept here; after that, in
  // the tensors below, and these are stale.
  double host_scale_;
  int64_t host_tracker_ = 0;
  Tensor scale_;      // 0-d float64
  Tensor inv_scale_;  // 0-d float64, 1 / scale_ computed in double
  Tensor tracker_;    // 0-d int64
  Tensor found_inf_;  // 0-d float32, this step's flag; undefined before the first unscale
  bool step_open_ = false;  // an unscale ran since the last update()
  uint64_t epoch_ = 0;      // globally unique; renewed by update(), loads and copies
  struct StepGrad {
    std::weak_ptr<TensorImpl> owner;
    InStep state;
  };
  std::unordered_map<uint64_t, StepGrad> step_grads_;  // this step's gradients, by their tensor's id
  FoundInfHook found_inf_hook_;
  bool found_inf_synced_ = false;  // the hook has seen found_inf_ since its last unscale
};

}  // namespace mixgrad::amp
