// mixgrad/autodiff/no_grad.hpp — a scope in which nothing is recorded.
//
// Ops run inside a no_grad scope are written to no GradManager's tape, and
// their outputs are not tracked, even while managers record (PyTorch's
// `torch.no_grad()`). The usual uses: an average of the weights, a metric
// or a manual update computed in the middle of a recorded step.
//
//   auto recording = gm.record();
//   auto loss = mg::F::mse_loss(net(x), y);
//   {
//     mg::autodiff::no_grad guard;           // not recorded, nothing saved
//     ema_w = ema_w * 0.99 + w * 0.01;
//   }
//   gm.backward(loss);                       // recording resumed after the scope
//
// Scopes nest (recording resumes when the outermost one closes) and restore
// the state they found also when an exception leaves them. The state is per
// thread: a scope on one thread does not stop a recording on another.
// Backward passes, optimizer steps and weight initialisation run in the same
// state internally.
//
// Cost: opening and closing a scope is a counter increment and decrement;
// the per-op check is the thread-local test every op already makes when it
// decides whether to record, so ops inside the scope cost what they cost
// with no manager recording.
#pragma once

namespace mixgrad::autodiff {

/// Stops recording on this thread for the object's lifetime.
class [[nodiscard]] no_grad {
 public:
  no_grad();
  ~no_grad();
  no_grad(const no_grad&) = delete;
  no_grad& operator=(const no_grad&) = delete;
};

/// PyTorch's `torch.inference_mode()`. The tape already skips every op
/// inside a no_grad scope (no closure is built, nothing is saved, outputs are
/// not tracked), so inference mode has nothing further to skip: it is the
/// same class. Unlike PyTorch, tensors made inside it are ordinary tensors
/// that later recordings may use.
using inference_mode = no_grad;

/// False inside a no_grad scope on this thread (and inside a backward pass
/// or an optimizer step), true otherwise: PyTorch's `is_grad_enabled()`.
/// Whether an op is actually recorded also needs a recording GradManager
/// that tracks one of its inputs.
bool is_grad_enabled();

}  // namespace mixgrad::autodiff
