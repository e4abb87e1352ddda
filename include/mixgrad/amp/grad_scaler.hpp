// mixgrad/amp/grad_scaler.hpp — dynamic loss scaling for mixed precision.
//
// Small gradients underflow in float16 / bfloat16. A GradScaler multiplies
// the upstream gradient of the loss by `scale_factor()` so that the whole
// backward pass runs on scaled values, then divides the parameters'
// gradients by it again ("unscale") and adapts the scale: halve it when a
// gradient overflowed to inf / NaN (the step is skipped), double it after
// `growth_interval` clean steps. Two gears, as in MegEngine:
//
//   mg::amp::GradScaler scaler;                  // 2^4, x2 growth, x0.5 backoff, every 2000, floor 2^-14
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
//   // a gradient penalty (PyTorch's test_grad_scaling_penalty) through the automatic gear
//   { auto rec = gm.record(); auto loss = ...;
//     scaler.backward(gm, loss, {}, {.create_graph = true});  // w.grad(): unscaled, tracked
//     auto penalty = F::sum(F::pow(w.grad(), 2.0));
//     opt.clear_grad();
//     scaler.backward(gm, F::add(loss, penalty)); }           // unscale, update
//   opt.step().clear_grad();                                   // skipped if either pass overflowed
//
// PyTorch's recipe works as written: `gm.backward(scaler.scale(loss));
// scaler.step(opt); scaler.update();` — step() unscales the optimizer's
// gradients that this scaler scaled and has not unscaled (inside the
// optimizer's fused update kernel for one that supports it).
//
// Device-resident state. The scale (and its reciprocal), the growth count
// and the step's found-inf flag live in one-element tensors on the device of
// the first loss or gradients the scaler sees (the CPU is a device too), and
// every per-step call works on them there: backward() forms the scaled dy
// from the scale tensor, unscale() is one fused check-and-unscale pass that
// sets the flag (PyTorch's `_amp_foreach_non_finite_check_and_unscale_`),
// update() is a one-element kernel (`_amp_update_scale_`), and the
// optimizers read the flag in their fused update kernels and change
// nothing when it is set. So a training step never waits for the device.
// scale_factor(), growth_tracker() and found_non_finite() answer on the host
// and therefore synchronise, only when called; state_dict() copies on the
// device.
//
// How an optimizer learns of the flag: unscale() marks each gradient it
// unscaled with its step's flag. Optimizer::step() passes a gradient's flag
// to the update kernel, so MegEngine's `scaler.backward(gm, loss);
// opt.step()` skips an overflowed step with no host read. Gradients that
// scaler.backward or scaler.scale(loss) scaled without unscaling are marked
// too: Optimizer::step() refuses them (StateError), and step(opt) unscales
// them first. A dy the user scaled by hand (`full_like(loss,
// scaler.scale_factor())`, MegEngine's manual gear) makes gradients of
// unknown scale: unscale() takes them (the caller says they are scaled),
// and step(opt) refuses them until then, as it refuses gradients that did
// not come through this scaler at all. The rule, and every path it covers,
// is in docs/amp.md ("Scaled gradients never reach an optimizer by
// mistake").
//
// A disabled scaler, `GradScaler({.enabled = false})`, passes everything
// through (PyTorch's `enabled=False`), so one training loop serves float32
// and mixed precision alike:
//
//   mg::amp::GradScaler scaler({.enabled = use_amp});
//   { mg::amp::autocast ac(use_amp); ...; scaler.backward(gm, loss); }
//   scaler.step(opt);
//
// It has scale_factor() 1; backward() is gm.backward(); unscale() and
// update() do nothing (no inf / NaN check, no gradient marked, no check of
// their arguments, no tensor created); found_non_finite() is false, so
// step() always steps.
//
// The scale's range. The scale multiplies the loss's upstream gradient
// (float32 under autocast, or the loss's own dtype) and its reciprocal
// multiplies the gradients in float arithmetic (double for float64 grads),
// so both must stay finite, nonzero and normal in float32: every scale lies
// in [kMinScaleLimit, kMaxScaleLimit] = [2^-126, 2^126], whatever the
// options say. A scale outside it is either useless (a float32 dy of inf
// overflows every step; PyTorch likewise refuses such growth) or poisonous
// (1 / scale rounds to inf in float, 0 * inf = NaN turns every clean step
// into an "overflow" and the scale backs off for ever: the scaler is stuck).
// The scale tensor is float64 (PyTorch's is float32), so the scale and its
// reciprocal are exactly the doubles this header speaks of and a state dict
// round-trips bit for bit.
//
// Where mixgrad differs from MegEngine and PyTorch, deliberately:
// - `update(new_scale)` applies new_scale also when growth_interval == 0
//   (MegEngine ignores it then).
// - The scale never leaves [kMinScaleLimit, kMaxScaleLimit], nor grows past
//   `max_scale` or backs off below `min_scale`. min_scale defaults to
//   kDefaultMinScale (2^-14); both libraries have no floor, so a long run of
//   NaN losses (bad batches, not a too-large scale) drives their scale to 0
//   or a denormal from which it never recovers. See kDefaultMinScale.
// - Unscale takes any range of tensors, once: within one step (the unscale
//   calls between two update() calls) unscaling a tensor whose gradient was
//   already unscaled throws StateError instead of dividing it twice.
//   Different ranges in one step are fine.
// - The non-finite check runs also for a static scale (growth_interval == 0):
//   an overflowing step is still skipped, only the scale stays as it is.
// - All unscale calls of a step share one flag: an overflow found by a later
//   call also skips the parameters that earlier calls of the step unscaled.
// - On overflow the gradients are left as unscaled (holding the inf / NaN),
//   not cleared as MegEngine does: clearing needs the flag on the host. The
//   optimizers skip them all the same (parameters and state unchanged, step
//   counts not advanced); a gradient keeps its step's flag until it is
//   cleared (clear_grad) or unscaled again, so do not step on it with
//   another loop.
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
/// normal number, so that the scale (as a float32 dy) and its reciprocal
/// 2^126 (applied to gradients in float) are both finite and normal, also
/// where denormals are flushed to zero.
inline constexpr double kMinScaleLimit = 0x1p-126;
/// The largest scale any GradScaler takes: 2^126, the mirror image of
/// kMinScaleLimit. Larger scales overflow a float32 upstream gradient of one
/// (float32's largest finite number is just below 2^128), so every step
/// would be skipped.
inline constexpr double kMaxScaleLimit = 0x1p126;
/// The default min_scale: 2^-14, the smallest scale for which the scale and
/// its reciprocal are both normal float16 numbers (float16's normal range is
/// [2^-14, 65504]), so a float16 loss's dy is still exact. A scale this small
/// only helps gradients above 2^14 * 65504 (about 1e9) fit float16: a
/// diverged model, which no scale rescues. In return it bounds what a long
/// run of non-finite losses can do: the scale stops at 2^-14 and, once the
/// losses are clean again, climbs back to 2^16 in 30 growths (60,000 steps
/// at the default growth_interval) instead of sinking towards 0.
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

  /// The automatic gear: `gm.backward(y, dy * scale)` (dy defaults to ones,
  /// so the upstream gradient is the scale), formed on y's device from the
  /// scale tensor, then `unscale(gm.attached_tensors())` if
  /// options.unscale_grad (else the gradients stay scaled, marked as this
  /// scaler's, for step(opt) or unscale() to unscale), then update() as
  /// options.update_scale says. Throws StateError, before any backward, if
  /// an attached tensor's gradient holds values the scaled ones must not be
  /// added to: unscaled (in this step or an earlier one), of unknown scale,
  /// not scaled, scaled by another scaler or before the last update(), or
  /// stepped in this step; GradManager's own errors pass through with the
  /// scaler unchanged.
  ///
  /// With options.create_graph (a gradient penalty: `scaler.backward(gm,
  /// loss, {}, {.create_graph = true})`) the backward is recorded (gm keeps
  /// recording) and so is the unscale: each attached tensor's gradient is
  /// replaced by `grad * (1 / scale)` (computed in float32 for 16-bit
  /// gradients, in the gradient's dtype otherwise), a new tracked tensor, so
  /// a penalty on it differentiates through the unscale; the scaled
  /// gradients are left untouched by the pass that sets the step's found-inf
  /// flag, and the unscaled ones carry the flag. Such a backward is the first
  /// pass of a step, not its end: `if_unscale_grad` does not update here
  /// (`always` still does, and so ends the step there). Clear the gradients
  /// and finish with the usual backward of the penalised loss: it unscales
  /// and updates, and shares the step's flag, so an overflow in either pass
  /// skips the step.
  void backward(autodiff::GradManager& gm, const Tensor& y, const Tensor& dy = Tensor(),
                const ScaledBackwardOptions& options = {});
  /// As above for several outputs; `dys` is empty or one per output (an
  /// undefined entry stands for ones).
  void backward(autodiff::GradManager& gm, const std::vector<Tensor>& ys, const std::vector<Tensor>& dys = {},
                const ScaledBackwardOptions& options = {});

  /// PyTorch's `scaler.scale(loss)`: `loss * scale`, recorded like any op,
  /// in loss's dtype and on its device (the scale is read there, no
  /// synchronisation), and marked as scaled by this scaler, so that the
  /// gradients of `gm.backward(scaler.scale(loss))` carry the mark:
  /// step(opt) unscales them, unscale() may unscale them first (to clip),
  /// and a plain opt.step() refuses them. The recipe
  ///
  ///   gm.backward(scaler.scale(loss)); scaler.step(opt); scaler.update();
  ///
  /// gives the automatic gear's parameters bit for bit. Only the marked
  /// tensor itself carries the mark: an op on it (`scale(loss) * 0.5`)
  /// makes an unmarked tensor, whose gradients step(opt) refuses. A
  /// disabled scaler returns loss unchanged (PyTorch's `enabled=False`).
  /// Throws DTypeError for an undefined or non-floating loss.
  Tensor scale(const Tensor& loss);
  /// As scale(loss) for each of `losses` (PyTorch scales an iterable).
  std::vector<Tensor> scale(const std::vector<Tensor>& losses);

  /// The current scale: what the loss's upstream gradient is multiplied by
  /// (1 for a disabled scaler). Reads the scale tensor: a synchronisation.
  double scale_factor() const;

  /// False for a scaler constructed with `enabled = false`.
  bool is_enabled() const { return options_.enabled; }

  /// Divides the gradients of `tensors` by the scale in one fused pass over
  /// all of them on their device (1 / scale computed in double, applied in
  /// float, or in double for float64 gradients; finite and normal in both,
  /// as the scale is in range) and sets this step's found-inf flag when any
  /// value is (or becomes) inf or NaN. Tensors without a gradient are
  /// skipped. It takes gradients this scaler scaled (since the last
  /// update()), and gradients the caller says are scaled (of unknown scale,
  /// from a dy scaled by hand, or unmarked); it refuses with StateError
  /// gradients already unscaled (in this step or an earlier one: clear them
  /// before the next backward), scaled by another scaler or before the last
  /// update(), and mixed ones. The first unscale after update() starts a step with a fresh,
  /// clear flag; every gradient unscaled in the step is marked with it, so
  /// that optimizers skip the step if it is set (see the overview); the
  /// gradients themselves are kept. Throws StateError for a tensor already
  /// unscaled in this step, and DTypeError / DeviceError / ShapeError for
  /// gradients the pass cannot take (not floating, on several devices,
  /// broadcast views); a throw changes no gradient and no scaler state.
  /// Returns *this.
  GradScaler& unscale(const std::vector<Tensor>& tensors);

  /// True when an unscale of the current step found inf or NaN. update()
  /// ends the step but keeps this readable (for step()) until the first
  /// unscale of the next step. Reads the flag tensor: a synchronisation.
  bool found_non_finite() const;

  /// Ends the step and adapts the scale, on the scale's device. With
  /// `new_scale` (within [min_scale, max_scale] and [kMinScaleLimit,
  /// kMaxScaleLimit], else ValueError with nothing changed), the scale
  /// becomes exactly new_scale, whatever else holds. Otherwise, for a
  /// dynamic scale: after an overflow (the flag of this step, if an unscale
  /// ran since the last update) the scale is multiplied by backoff_factor
  /// (clamped up to min_scale, or kMinScaleLimit without one) and the growth
  /// count restarts; after a clean step the count grows by one and, on
  /// reaching growth_interval, the scale is multiplied by growth_factor
  /// (clamped down to max_scale, or kMaxScaleLimit without one) and the count
  /// restarts. growth_interval == 0 keeps the scale static.
  void update(std::optional<double> new_scale = std::nullopt);

  /// The optimizer step of a mixed-precision loop: the gradients of opt's
  /// parameters that this scaler scaled (its backward without unscale, or a
  /// backward of scale(loss)) and no unscale has unscaled yet are unscaled
  /// (so the update never uses scaled values), and
  /// opt's kernels skip the update when the step's flag is set (parameters,
  /// state and step counts unchanged). By default they are unscaled in place
  /// (one fused pass over all of them), then `opt.step()` runs. For an
  /// optimizer built with `step_supports_amp_scaling` (PyTorch's
  /// `_step_supports_amp_scaling`; `opt.step(scaler)` asks for the same),
  /// on any device, the unscale is fused into the update instead: one read-only
  /// pass over those gradients sets the flag, and the update kernel
  /// multiplies each gradient by 1 / scale as it reads it, so the gradients
  /// are never written and stay scaled in memory afterwards (unscale() first
  /// if you need them unscaled, e.g. to clip them, or after: it then
  /// unscales them in place, once). Several optimizers may step the same
  /// gradients in one step, in any order: a fused one multiplies by 1 /
  /// scale what is still scaled, another gets them unscaled in place first
  /// (once; later ones then read them unscaled). The
  /// results agree to rounding: the fused product is not rounded to a
  /// 16-bit gradient's dtype. A throw (the optimizer's gradient checks)
  /// leaves gradients, optimizer and scaler unchanged. No synchronisation;
  /// works after unscale() and after update() alike. Gradients another
  /// scaler scaled (or this one before it was moved) are left to opt.step(),
  /// which refuses them with StateError. Refused with StateError before
  /// anything changes, since step() cannot tell whether they hold the scale:
  /// gradients that did not come through this scaler (a backward of an
  /// unscaled loss, or of a dy the user scaled by hand: unscale() them
  /// first), gradients this scaler scaled before the last update() (the
  /// scale may have changed since: step, then update), and mixed ones. To
  /// learn whether the step was
  /// taken, ask found_non_finite() (a synchronisation). A disabled scaler
  /// just steps. Any AmpStepTarget (mixgrad/amp_step.hpp) is stepped this
  /// way: the scaler hands it an AmpStep.
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
  /// Installs `hook` (an empty function removes it). It runs at most once
  /// per step, after the step's last unscale and before anything reads the
  /// flag for the step: at the start of step(opt) (after its own unscale),
  /// or of update(), whichever comes first; an unscale after it runs makes
  /// it run again. It must write the flag in place (the gradients unscaled
  /// in the step hold this tensor), with a value of 0 or 1. Data-parallel
  /// training installs an all-reduce (max) of the flag here
  /// (distributed::sync_grad_scaler), so all ranks skip the same steps.
  /// A disabled scaler never calls it. Returns *this.
  GradScaler& set_found_inf_hook(FoundInfHook hook);
  /// Runs the hook now if the flag of the current step has not been through
  /// it yet (nothing without a hook, before the first unscale, or when
  /// disabled). step(), update() call it; call it yourself only before
  /// reading the flag by other means.
  void sync_found_inf();

  /// MegEngine's keys, as 0-d tensors: "scale_factor" (float64, a copy of
  /// the scale tensor, on its device), "growth_factor", "backoff_factor"
  /// (float64), "growth_interval" (int64), "_growth_tracker" (int64, a copy
  /// of the count); plus "min_scale" / "max_scale" (float64) when they are
  /// set (min_scale is, by default), and "enabled" (bool, false) for a
  /// disabled scaler (whose "scale_factor" is the unused internal scale, the
  /// one it would start from if enabled, not scale_factor()'s 1). No
  /// synchronisation.
  StateDict state_dict() const;
  /// Restores a state_dict(). Every value must be a one-element tensor of
  /// any numeric dtype (so dicts saved as all-float64, as older mixgrad
  /// versions did, load too); it is read on the host. Unknown or missing
  /// keys and invalid values (the constructor's rules, scale_factor taking
  /// init_scale's; integral, in-range growth_interval and _growth_tracker;
  /// "enabled" 0 or 1) throw ValueError, a tensor of more than one element
  /// ShapeError, and load nothing. A dict without "min_scale" (MegEngine's)
  /// loads as having none: only kMinScaleLimit bounds the backoff. A load
  /// starts a fresh step: the overflow flag and the unscaled set are cleared.
  /// `enabled` is a construction setting, like init_scale: a load never
  /// switches the scaler on or off. An enabled scaler loading a disabled
  /// one's dict resumes from the scale that one was kept at (its init_scale);
  /// a disabled scaler keeps the loaded values but stays a pass-through.
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
