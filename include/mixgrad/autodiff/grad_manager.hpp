// mixgrad/autodiff/grad_manager.hpp — MegEngine-style tape autodiff.
//
// A GradManager computes gradients for the tensors attached to it. Ops run
// while it records are written to its tape when one of their inputs depends
// on an attached tensor; backward() walks the tape in reverse and
// *accumulates* into each attached tensor's `.grad()`.
//
//   mg::autodiff::GradManager gm;
//   gm.attach(net.parameters());
//   {
//     auto recording = gm.record();              // Python's `with gm:`
//     auto loss = mg::F::cross_entropy(net(x), y);
//     gm.backward(loss);                         // fills p.grad(), ends recording
//   }
//   opt.step().clear_grad();
//
// Semantics (MegEngine's): attached tensors are held weakly; backward ends
// the recording (unless create_graph); several managers are independent of
// one another, except that an outer manager records an inner manager's
// backward, so it can differentiate the inner gradients again (see
// grad_manager_group.hpp for groups and the visibility rules). The set of
// recording managers is per thread.
//
// Higher order (PyTorch's create_graph, MegEngine's nested managers):
//
//   auto recording = gm.record();
//   auto loss = mg::F::mse_loss(net(x), y);
//   gm.backward(loss, {}, {.create_graph = true});     // p.grad() tracked, still recording
//   auto penalty = mg::F::sum(mg::F::mul(p.grad(), p.grad()));
//   p.set_grad({});                                     // keep only the second pass's sum
//   gm.backward(mg::F::add(loss, penalty));             // d(loss + ||dL/dp||^2)/dp
//
// Gradient-ready callbacks. A tensor's callbacks `(tensor, grad) -> grad` run
// once per backward, chained in the order they were attached, as soon as its
// gradient is final: right after the reverse walk has processed the earliest
// recorded op that uses the tensor on a path to the outputs, and before the
// walk goes on to earlier ops; so the last layers' parameters are ready first.
// A tensor no gradient reaches gets no call. An op's output attached while
// recording gets its gradient (and its calls) like a leaf. After the walk, the
// after-backward hooks run once, and only then are the callbacks' results
// added to `.grad()`. That is the shape data-parallel training needs
// (MegEngine's AllreduceCallback):
//
//   gm.attach(net.parameters(), {[&](const Tensor& p, const Tensor& g) {
//     return reducer.start(p, g);          // async all-reduce of the bucket;
//   }});                                   // returns the buffer it writes
//   gm.register_after_backward_callback([&] { reducer.wait(); });
//
// Failures: if a callback or hook throws, backward rethrows it with no
// `.grad()` changed (the tape is spent and the recording ended as always);
// callbacks of tensors that were ready before it have run, and their side
// effects (a started reduction) are the caller's to drop.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "mixgrad/tensor.hpp"

namespace mixgrad::autodiff {

class GradManager;

/// `(tensor, grad) -> grad`: sees a tensor's complete gradient of one
/// backward as soon as it is final and returns what is added to its
/// `.grad()` (after the after-backward hooks). Returning an undefined Tensor
/// means "no gradient for this tensor" (MegEngine's `return None`): its
/// `.grad()` is left as it is for this backward. The tensor's later
/// callbacks still run, each given what the previous one returned (then
/// undefined), as MegEngine chains them; a later one may return a gradient
/// again.
using GradCallback = std::function<Tensor(const Tensor& tensor, const Tensor& grad)>;

/// Options of GradManager::backward.
struct BackwardOptions {
  /// Records the backward pass itself (PyTorch's `create_graph=True`): the
  /// gradients written to `.grad()` are tracked by this manager, which keeps
  /// recording (its tape is kept, as PyTorch's retain_graph), so an op on
  /// them (a gradient penalty) and a later backward differentiate through
  /// them. The backward runs with autocast off, in the forward's dtypes. An
  /// op whose backward is not differentiable (docs/autodiff.md lists them)
  /// marks its gradients, and a later backward that reaches one throws
  /// StateError naming the op.
  bool create_graph = false;
};

/// RAII recording scope returned by GradManager::record(); ends the
/// recording (if backward has not already) when it goes out of scope.
class [[nodiscard]] RecordingScope {
 public:
  explicit RecordingScope(GradManager& gm) : gm_(&gm) {}
  RecordingScope(RecordingScope&& o) noexcept : gm_(o.gm_) { o.gm_ = nullptr; }
  RecordingScope(const RecordingScope&) = delete;
  RecordingScope& operator=(const RecordingScope&) = delete;
  RecordingScope& operator=(RecordingScope&&) = delete;
  ~RecordingScope();

 private:
  GradManager* gm_;
};

class GradManager {
 public:
  GradManager();
  ~GradManager();
  GradManager(const GradManager&) = delete;
  GradManager& operator=(const GradManager&) = delete;

  /// Attaches tensors (held weakly) with optional callbacks; attaching a
  /// tensor again adds its callbacks without duplicating it. Non-floating
  /// tensors throw DTypeError. Returns *this for chaining.
  GradManager& attach(const std::vector<Tensor>& tensors, const std::vector<GradCallback>& callbacks = {});
  GradManager& attach(const Tensor& tensor, const std::vector<GradCallback>& callbacks = {});

  /// Adds a hook run once at the end of every backward (also through
  /// amp::GradScaler::backward): after every gradient-ready callback, before
  /// the gradients are added to `.grad()` (MegEngine's
  /// `_register_after_backward_callback`). Hooks run in registration order
  /// and stay registered. An empty function throws ValueError.
  GradManager& register_after_backward_callback(std::function<void()> callback);

  /// Adds a hook run during every backward after each op's backward step
  /// (and its gradient-ready callbacks), for work that must advance while
  /// backward computes: the data-parallel reducer drives its running
  /// all-reduces there (MPI moves data only inside MPI calls). It runs once
  /// per op on the walk, so it must be cheap when it has nothing to do; it
  /// must not read or change `.grad()`. A throw ends the backward as a
  /// callback's does. Hooks run in registration order and stay registered;
  /// an empty function throws ValueError.
  GradManager& register_backward_progress_callback(std::function<void()> callback);

  /// The live attached tensors in first-attach order.
  std::vector<Tensor> attached_tensors() const;

  /// How many backward calls this manager has begun (this one included).
  /// A callback that keeps state between its calls reads it to tell a new
  /// backward from one that ended by a throw before its hook ran.
  uint64_t backward_count() const;
  /// Inside a backward (its callbacks and hooks): the loss-scale mark the
  /// gradients it adds to `.grad()` get; outside one, an empty mark. For a
  /// hook that gives other tensors their gradients itself (the sharded
  /// optimizer's reduce-during-backward).
  GradScaling backward_scaling() const;

  /// Starts recording on this thread; throws StateError if already recording.
  /// Keep the returned scope alive for the duration (`with gm:`).
  RecordingScope record();
  /// Ends the recording and drops the tape; does nothing if not recording.
  void release();
  bool is_recording() const;

  /// Backpropagates from `y` with upstream gradient `dy` (ones of y's shape
  /// when undefined), running each attached tensor's callbacks when its
  /// gradient is final, then the after-backward hooks, then accumulates into
  /// the attached tensors' `.grad()`. Ends the recording. Throws StateError
  /// when not recording (no hook runs then).
  void backward(const Tensor& y, const Tensor& dy = Tensor());
  /// Several outputs at once; `dys` is empty (all ones) or one per output.
  void backward(const std::vector<Tensor>& ys, const std::vector<Tensor>& dys = {});
  /// As above with options: `gm.backward(y, dy, {.create_graph = true})`
  /// records the backward and keeps recording (see BackwardOptions).
  void backward(const Tensor& y, const Tensor& dy, const BackwardOptions& options);
  void backward(const std::vector<Tensor>& ys, const std::vector<Tensor>& dys, const BackwardOptions& options);

  struct State;  // the tape and the attached set; see src/autodiff

 private:
  friend struct TapeAccess;
  std::unique_ptr<State> state_;
};

}  // namespace mixgrad::autodiff
