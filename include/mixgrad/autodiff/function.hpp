// mixgrad/autodiff/function.hpp — user-defined ops with their own backward.
//
// A Function is an op written by the user: forward() computes the outputs
// from the inputs, backward() maps the outputs' gradients to the inputs'.
// apply() runs forward without recording the ops inside it and writes the
// function onto the tape of every recording GradManager as one op, exactly
// like a built-in op (PyTorch's `torch.autograd.Function`, MegEngine's
// `megengine.autodiff.Function`). What backward needs is kept in members
// (PyTorch's `ctx.save_for_backward`):
//
//   struct Exp : mg::autodiff::Function {
//     mg::Tensor result;
//     std::string name() const override { return "Exp"; }
//     std::vector<mg::Tensor> forward(const std::vector<mg::Tensor>& in) override {
//       result = mg::F::exp(in[0]);
//       return {result};
//     }
//     std::vector<mg::Tensor> backward(const std::vector<mg::Tensor>& dy) override {
//       return {mg::F::mul(dy[0], result)};
//     }
//   };
//   auto y = mg::autodiff::apply(std::make_shared<Exp>(), {x})[0];
//
// Contract:
// - backward returns one tensor per input, in the inputs' order; an
//   undefined tensor means "no gradient for this input" (PyTorch's None).
//   A gradient is ignored for an input no recording manager tracks.
//   Otherwise: a wrong count or a gradient of another shape than its input
//   throws ShapeError, a non-floating one DTypeError, one on another device
//   DeviceError, all naming the function; GradManager::backward then
//   rethrows with no `.grad()` changed. A gradient of another floating dtype
//   is converted to the input's.
// - Outputs that are not floating (indices) get no gradient and are not
//   tracked. An output that is one of the inputs is returned as a detached
//   alias, so the tape never sees an op whose output is its own input.
// - Several outputs: the tape records one op per output; backward is called
//   once for each output that receives a gradient, with that output's
//   gradient and zeros for the others (PyTorch's default,
//   materialize_grads). A single-output function — the usual case — runs its
//   backward once. In a recorded backward (create_graph, nested managers)
//   backward's F:: ops are recorded like any op, so the function is
//   differentiable again when they are; set `once_differentiable` when it
//   is not.
// - The function object is shared by the tape until the backward (or the
//   end of the recording) releases it; apply() the same object only once per
//   recording if its members hold per-call state.
//
// Autocast (PyTorch's `custom_fwd` / `custom_bwd`):
// - With `cast_inputs` set (custom_fwd(cast_inputs=...)), when autocast is
//   active at the call, forward runs with autocast disabled and its
//   floating inputs other than float64 cast to that dtype; the outputs keep
//   the dtype forward gives them. Outside autocast, or with `cast_inputs`
//   unset, forward sees the inputs as given and runs in the caller's
//   autocast state (its ops are cast by their own policies).
// - backward always runs in the autocast state that was in force at the
//   call to apply() (custom_bwd), whatever scope the GradManager's backward
//   runs in; gradients are converted to each input's own dtype.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mixgrad/dtype.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::autodiff {

/// Base class of user-defined differentiable ops; see the file comment.
class Function {
 public:
  virtual ~Function() = default;

  /// The name errors use; override it to tell your functions apart.
  virtual std::string name() const { return "Function"; }

  /// Computes the outputs; runs with recording paused. Keep in members what
  /// backward needs.
  virtual std::vector<Tensor> forward(const std::vector<Tensor>& inputs) = 0;

  /// One gradient per output in, one per input out (undefined: none).
  virtual std::vector<Tensor> backward(const std::vector<Tensor>& output_grads) = 0;

  /// When set and autocast is active at apply(): forward runs with autocast
  /// off and its floating (non-float64) inputs cast to this dtype.
  std::optional<DType> cast_inputs;

  /// PyTorch's `@once_differentiable`: backward runs unrecorded even in a
  /// recorded backward (create_graph, nested managers), and a later backward
  /// that would differentiate through its gradients throws StateError naming
  /// the function, instead of missing their second-order term. For backwards
  /// written with raw kernels or host code.
  bool once_differentiable = false;
};

/// Runs `fn->forward(inputs)` and records it as one op (one tape node per
/// floating output) on every recording GradManager that tracks an input.
/// Throws ValueError for a null `fn` or an undefined output (nothing is
/// recorded then); forward's own exceptions pass through.
std::vector<Tensor> apply(const std::shared_ptr<Function>& fn, const std::vector<Tensor>& inputs);

}  // namespace mixgrad::autodiff
