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
// checkpoint, before any gradient is written.
//
// Selective checkpointing (PyTorch's selective activation checkpointing):
//
//   auto y = mg::autodiff::checkpoint(layer, x, {.keep = mg::autodiff::kept_products()});
//
// keeps the results of the named ops (the matmuls, convolutions, attention)
// from the first run; the recomputation gets them back instead of computing
// them again and recomputes only the cheap ops between them. A kept result
// written in place since (version changed) is recomputed instead. A
// recomputation that runs other kept ops than the first run throws
// StateError naming the checkpoint and the op. is_recomputing() is true while `fn`
// runs again: nn::Checkpoint uses it to keep batch norm's running statistics
// from being updated twice.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "mixgrad/tensor.hpp"

namespace mixgrad::autodiff {

struct CheckpointOptions {
  /// The name errors use.
  std::string name = "checkpoint";
  /// Run the recomputation with the random generator's state of the first
  /// run (PyTorch's preserve_rng_state); false saves nothing and draws anew.
  bool preserve_rng_state = true;
  /// Selective checkpointing: the ops whose results are kept from the first
  /// run and handed back in the recomputation instead of computed again, so
  /// only the others (norms, activations, dropout, elementwise) are
  /// recomputed. Names from the op table: "matmul" (every rank, and the
  /// products addmm / baddbmm are made of), "linear", "conv1d", "conv2d",
  /// "conv_transpose2d", "scaled_dot_product_attention" (its fused path);
  /// kept_products() lists them all. Empty: keep nothing (full
  /// checkpointing). Another name throws ValueError.
  std::vector<std::string> keep = {};
  /// Which calls of a `keep` op are kept: called with the op's name and the
  /// call's index among that op's calls in one run of fn (0, 1, ...); it
  /// must answer the same in the recomputation. Empty: every call. Keeping
  /// every other product (torchtitan's selective policy) keeps a transformer
  /// layer's wide in-projections and recomputes its narrow out-projections:
  ///   .keep_if = [](std::string_view op, int64_t n) { return op != "linear" || n % 2 == 0; }
  std::function<bool(std::string_view op, int64_t call)> keep_if = {};
};

/// Every op name CheckpointOptions::keep takes: the products and attention,
/// the expensive ops whose results PyTorch's selective activation
/// checkpointing typically saves.
std::vector<std::string> kept_products();

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
