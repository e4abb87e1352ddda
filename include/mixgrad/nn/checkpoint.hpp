// mixgrad/nn/checkpoint.hpp — a module run checkpointed: its activations are
// recomputed in the backward instead of kept (mixgrad/autodiff/checkpoint.hpp);
// or run as a DTR segment, kept unless DTR evicts it (mixgrad/autodiff/dtr.hpp).
//
//   mg::nn::Sequential net(mg::nn::Checkpoint(block1), mg::nn::Checkpoint(block2), head);
//   mg::nn::Sequential net(mg::nn::Segment(block1), mg::nn::Segment(block2), head);   // with mg::dtr::enable
//
// The wrapped module is the child "module" (state-dict keys "module.<name>").
// Its forward runs twice in training: once without keeping anything, once in
// the backward. The second run leaves the buffers as the first left them, so
// batch norm's running statistics are updated once per step, as without
// checkpointing.
#pragma once

#include <memory>

#include "mixgrad/nn/module.hpp"

namespace mixgrad::nn {

class Checkpoint : public Module {
 public:
  template <std::derived_from<Module> M>
  explicit Checkpoint(M module) : Checkpoint(std::shared_ptr<Module>(std::make_shared<M>(std::move(module)))) {}
  /// StateError for a null module.
  explicit Checkpoint(std::shared_ptr<Module> module);

  /// autodiff::checkpoint(module, x).
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;
  /// The wrapped module.
  Module& module() const { return *module_; }

 private:
  std::shared_ptr<Module> module_;
};

/// A module run as a dtr::segment: kept while memory allows, evicted and
/// recomputed in the backward when DTR needs room (with DTR off, or outside a
/// recording, just the module). As Checkpoint, the child "module", and a
/// recomputation that leaves batch norm's running statistics as they were.
class Segment : public Module {
 public:
  template <std::derived_from<Module> M>
  explicit Segment(M module) : Segment(std::shared_ptr<Module>(std::make_shared<M>(std::move(module)))) {}
  /// StateError for a null module.
  explicit Segment(std::shared_ptr<Module> module);

  /// dtr::segment(module, x).
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;
  Module& module() const { return *module_; }

 private:
  std::shared_ptr<Module> module_;
};

}  // namespace mixgrad::nn
