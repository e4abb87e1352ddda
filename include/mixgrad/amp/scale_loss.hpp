// mixgrad/amp/scale_loss.hpp — apex's `with amp.scale_loss(loss, optimizer) as scaled_loss:`.
//
// The backward of a loop that amp::initialize (initialize.hpp) set up runs
// inside a scale_loss scope. Two forms; the first is the closest to Python's
// `with`, and an exception from the body propagates with nothing applied:
//
//   mg::amp::scale_loss(loss, opt, [&](const mg::Tensor& scaled_loss) { gm.backward(scaled_loss); });
//   opt.step();
//
//   {
//     mg::amp::ScaledLoss scaled = mg::amp::scale_loss(loss, opt);
//     gm.backward(scaled.loss());
//     scaled.finish();              // optional: its end would finish too (see ScaledLoss)
//   }
//   opt.step();
//
// Several losses, models and optimizers (a GAN, apex's DCGAN example with
// `num_losses = 3`): each backward names its loss_id and the optimizers whose
// parameters it produces gradients for; the gradients of several scopes
// into one optimizer add up before its step:
//
//   mg::amp::scale_loss(loss_d_real, opt_d, [&](const mg::Tensor& s) { gm_d.backward(s); }, 0);
//   mg::amp::scale_loss(loss_d_fake, opt_d, [&](const mg::Tensor& s) { gm_d.backward(s); }, 1);
//   opt_d.step();
//   mg::amp::scale_loss(loss_g, {opt_g}, [&](const mg::Tensor& s) { gm_g.backward(s); }, 2);
//   opt_g.step();
//
// What a scope does, as apex:
// - At its start: the scaled loss is `loss` in float32 times the current
//   scale of loss_id's scaler (GradScaler::scale); the optimizers' gradients
//   from earlier scopes are set aside, so the backward writes fresh ones.
// - At its end: those fresh gradients, which must come from the scaled loss,
//   are unscaled in place (one fused pass, which also checks them for inf /
//   NaN), the scaler is updated (halved after an overflow, grown after 2000
//   clean steps), and the gradients set aside are added back. After an
//   overflow the optimizers' next step() changes nothing, on the device
//   without a host read: each unscaled gradient carries its step's found-inf
//   flag (a sum of two scopes' gradients, the flag of either). Under O2 the
//   16-bit gradients are unscaled in place and the optimizer's fused update
//   reads them into its float32 master weights (apex's master gradients).
// - With a fixed scale of 1 and no master weights (O0, O3) the scaled loss
//   is `loss` in float32 and the end does nothing, as in apex (no check, no
//   skipped step); with `enabled = false` the scaled loss is `loss` itself.
//
// Gradients the backward writes to tensors outside the given optimizers stay
// scaled (as in apex): clear them before their own optimizer's scope.
// Refused, with nothing changed (StateError / ValueError / DTypeError): no
// live amp::initialize handle, a loss_id outside [0, num_losses), an
// optimizer initialize did not see or listed twice, an optimizer that
// already has a scope open, an undefined or non-floating loss.
#pragma once

#include <concepts>
#include <functional>
#include <memory>
#include <vector>

#include "mixgrad/optim/optimizer.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::amp {

namespace detail {
struct ScopeState;
}

/// The optimizers a backward produces gradients for.
using Optimizers = std::vector<std::reference_wrapper<optim::Optimizer>>;

/// One scale_loss scope: loss() is the scaled loss to call backward on, and
/// its end unscales, updates the scaler and puts the earlier gradients back
/// (see the overview).
///
/// How it ends. finish() ends it and throws what goes wrong (a gradient that
/// did not come from the scaled loss, gradients the unscale cannot take); a
/// throwing finish() has changed nothing of the optimizers' gradients (they
/// are as at the scope's start) nor the scaler. The destructor never throws:
/// - after finish(), it does nothing;
/// - while an exception unwinds the scope, it abandons it: the optimizers'
///   gradients are put back as they were at its start and the scaler is left
///   as it was (the backward may not have finished);
/// - otherwise it finishes. If that fails, the gradients are put back as at
///   the start, and the error is kept and thrown by the next call of
///   scale_loss, amp::state_dict or amp::load_state_dict, since a destructor
///   cannot throw it (a scope that outlives its amp::Amp handle has no next
///   call: it writes the error to standard error). Call finish() (or use the
///   callable form) to get it where it happens.
class [[nodiscard]] ScaledLoss {
 public:
  /// What scale_loss makes (detail::ScopeState is the library's own).
  explicit ScaledLoss(std::unique_ptr<detail::ScopeState> state);
  ScaledLoss(ScaledLoss&& other) noexcept;
  ScaledLoss& operator=(ScaledLoss&&) = delete;
  ScaledLoss(const ScaledLoss&) = delete;
  ScaledLoss& operator=(const ScaledLoss&) = delete;
  ~ScaledLoss();

  /// The scaled loss (apex's `scaled_loss`): call backward on it, with the
  /// default upstream gradient. StateError once the scope has ended.
  const Tensor& loss() const;
  /// Ends the scope (see the class comment). StateError when it has ended.
  void finish();
  /// True once finish() ran or the scope was abandoned.
  bool finished() const;

 private:
  std::unique_ptr<detail::ScopeState> state_;
  int uncaught_;  // std::uncaught_exceptions() when the scope started
};

/// Opens a scope for the backward of `loss` into the gradients of
/// `optimizers`, with loss_id's scaler (see the overview for what is refused).
ScaledLoss scale_loss(const Tensor& loss, const Optimizers& optimizers, int loss_id = 0);
/// One optimizer.
ScaledLoss scale_loss(const Tensor& loss, optim::Optimizer& optimizer, int loss_id = 0);

/// The scope around `body(scaled_loss)`: finished when body returns, and
/// abandoned (nothing applied, gradients as before) when it throws, the
/// exception propagating.
template <class Body>
  requires std::invocable<Body&, const Tensor&>
void scale_loss(const Tensor& loss, const Optimizers& optimizers, Body&& body, int loss_id = 0) {
  ScaledLoss scope = scale_loss(loss, optimizers, loss_id);
  std::invoke(body, scope.loss());
  scope.finish();
}
/// One optimizer.
template <class Body>
  requires std::invocable<Body&, const Tensor&>
void scale_loss(const Tensor& loss, optim::Optimizer& optimizer, Body&& body, int loss_id = 0) {
  scale_loss(loss, Optimizers{optimizer}, std::forward<Body>(body), loss_id);
}

}  // namespace mixgrad::amp
