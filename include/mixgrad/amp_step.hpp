// mixgrad/amp_step.hpp — the protocol between a loss scaler and an optimizer.
//
// A mixed-precision step needs two things from the scaler, both on the
// device: the factor that unscales a gradient still multiplied by the loss
// scale, and the step's found-inf flag, which turns the update into a no-op.
// This header says how they travel, so that neither side needs the other's
// header: amp::GradScaler produces AmpSteps and marks gradients,
// optim::Optimizer consumes them, and a user's own optimizer or scaler can
// take either part.
//
//   // what GradScaler::step(opt) does for an optimizer that unscales in its update:
//   opt.check_step({.scaler = &scaler});          // throws before anything changes
//   ... a read-only pass over the still-scaled gradients sets found_inf ...
//   opt.step({.scaler = &scaler, .inv_scale = inv_scale, .found_inf = found_inf});
//
// Two routes, both without a host read:
// - Per step: an AmpStep names the scaler whose still-scaled gradients the
//   update multiplies by inv_scale, skipping them when found_inf is set.
// - Per gradient: a gradient carries how a loss scale multiplies it
//   (GradScaling): not at all as far as anyone knows, scaled by a scaler,
//   unscaled by one, of unknown scale (a backward whose dy the user gave),
//   or mixed (scaled and unscaled values summed). The GradManager combines
//   the marks as it accumulates, from the marks of the outputs and upstream
//   gradients a backward starts from (scaler.scale(loss) and the dy that
//   scaler.backward forms are marked scaled). A scaler's unscale() marks
//   each gradient it unscaled with the step's flag, so MegEngine's
//   `scaler.backward(gm, loss); opt.step()` skips an overflowed step;
//   optimizers refuse a gradient still scaled unless an AmpStep from that
//   scaler unscales it, and refuse a mixed one always. The mark belongs to
//   the gradient tensor: a gradient replaced by set_grad or dropped by
//   clear_grad carries none. docs/grad-scaler.md ("Scaled gradients never reach an
//   optimizer by mistake") has the whole rule.
#pragma once

#include <cstdint>
#include <vector>

#include "mixgrad/tensor.hpp"

namespace mixgrad {

/// The mixed-precision inputs of one optimizer step. The default, {}, is a
/// plain step (every gradient follows its own GradScaling mark).
struct AmpStep {
  /// The scaler whose still-scaled gradients (GradScaling::scaled_by) this
  /// step unscales inside the update; null: none.
  const void* scaler = nullptr;
  /// 0-d float64 on the gradients' device: those gradients are multiplied by
  /// it as the update reads them (they stay scaled in memory).
  Tensor inv_scale;
  /// One-element float32 flag on that device: when nonzero, the update of
  /// those gradients' parameters changes nothing (parameter, state, count).
  Tensor found_inf;
};

/// How a loss scale multiplies a tensor's values (see the overview).
enum class ScaleState : uint8_t {
  /// Not scaled as far as mixgrad can see: a gradient from a backward that
  /// started at unmarked outputs with the default dy, or set by hand.
  none,
  /// Multiplied by the scale of `scaled_by` as it was at `epoch`: from
  /// scaler.scale(loss), or a backward of scaler.backward that did not
  /// unscale.
  scaled,
  /// Scaled and then unscaled once; `found_inf` is the flag of that step.
  unscaled,
  /// From a backward given a dy by the user, which may hold a scale set by
  /// hand (MegEngine's manual gear): only an explicit unscale() says it does.
  unknown,
  /// The sum of contributions scaled differently (a scaled backward into an
  /// unscaled gradient, two scalers, a scale changed in between): no
  /// optimizer and no unscale takes it; clear it.
  mixed,
};

/// Names a ScaleState for error messages ("scaled", "unknown", ...).
const char* to_string(ScaleState state);

/// How a loss scale multiplies a tensor (a gradient, a loss, a dy).
struct GradScaling {
  /// The scaler that scaled it and has not unscaled it since; null unless
  /// state is ScaleState::scaled.
  const void* scaled_by = nullptr;
  /// The flag of the step that unscaled it (ScaleState::unscaled).
  Tensor found_inf;
  ScaleState state = ScaleState::none;
  /// With ScaleState::scaled: the scaler's epoch when it scaled (each
  /// update() of a scaler starts a new, globally unique epoch), so a
  /// gradient scaled before the scale changed is never unscaled after.
  uint64_t epoch = 0;
};

/// The mark of `grad`; empty for an undefined or never-marked gradient.
GradScaling grad_scaling(const Tensor& grad);
/// Marks `grad` (a no-op for an undefined tensor).
void set_grad_scaling(const Tensor& grad, GradScaling scaling);
/// The mark of `have + incoming`: what the GradManager writes on a gradient
/// it accumulates into. Equal scalings (none, or scaled by one scaler in one
/// epoch) stay; unscaled + none stays unscaled (with its flag); unknown +
/// none and none + unknown are unknown; anything else is mixed.
GradScaling accumulated_scaling(const GradScaling& have, const GradScaling& incoming);

/// What GradScaler::step(opt) needs of an optimizer: optim::Optimizer is
/// one. A type that is not one is stepped by GradScaler with a host read of
/// the flag instead.
class AmpStepTarget {
 public:
  /// The parameters the step updates.
  virtual const std::vector<Tensor>& parameters() const = 0;
  /// True when GradScaler::step should leave the unscale to the update (an
  /// AmpStep with inv_scale) instead of unscaling the gradients in place.
  virtual bool step_supports_amp_scaling() const = 0;
  /// Throws what step(amp) would throw, and changes nothing.
  virtual void check_step(const AmpStep& amp) const = 0;
  /// One update under `amp` (see AmpStep).
  virtual AmpStepTarget& step(const AmpStep& amp) = 0;

  virtual ~AmpStepTarget() = default;
};

}  // namespace mixgrad
