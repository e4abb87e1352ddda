// mixgrad/autodiff/checkpoint.hpp — activation checkpointing: keep a
// function's inputs, not its intermediate results, and recompute them in
// the backward (PyTorch's torch.utils.checkpoint, non-reentrant semantics).
//
//   auto y = mg::autodiff::checkpoint([&](const mg::Tensor& x) { return block(x); }, x);
//   // several inputs and outputs:
//   auto ys = mg::autodiff::checkpoint([&](const std::vector<mg::Tensor>& in) { ... return outs; }, {x, mask});
//
// The forward runs `fn` with nothing recorded: none of its ops keeps what its
// backward would need, so the memory of its intermediate results is freed as
// it goes. The tape holds one op for the whole call. When the backward
// reaches it, `fn` runs again, under the autocast state of the first call
// and with the global random generator at the state it had then (so dropout
// draws the same masks), recorded by a GradManager of its own; its backward
// gives the gradients of the inputs and of every tensor that a recording
// GradManager had attached (the parameters `fn` uses), which go to the tape
// like any op's. Frozen tensors get none. Nested checkpoints work; so does
// a GradScaler step (the scaled gradient flows through), and a recorded
// backward (create_graph, nested managers): the managers recording it record
// the recomputation and its backward too, so the gradients can be
// differentiated again. Gradients are those of the same computation without
// checkpointing.
//
// A recomputation that gives outputs of another shape or dtype than the
// first run (fn read state that changed) throws StateError naming the
// checkpoint, before any gradient is written. is_recomputing() is true while `fn`
// runs again: nn::Checkpoint uses it to keep batch norm's running statistics
// from being updated twice.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "mixgrad/tensor.hpp"

namespace mixgrad::autodiff {

struct CheckpointOptions {
  /// The name errors use.
  std::string name = "checkpoint";
  /// Run the recomputation with the random generator's state of the first
  /// run (PyTorch's preserve_rng_state); false saves nothing and draws anew.
  bool preserve_rng_state = true;
};

using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

/// Runs fn(inputs) checkpointed (see the file comment) and returns its outputs.
/// ValueError for an empty function or an undefined output.
std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               const CheckpointOptions& options = {});
/// One input, one output.
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input,
                  const CheckpointOptions& options = {});

/// True on this thread while a checkpoint's function runs again in the backward.
bool is_recomputing();

}  // namespace mixgrad::autodiff
