// mixgrad/nn/checkpoint.hpp — a module run checkpointed: its activations are
// recomputed in the backward instead of kept (mixgrad/autodiff/checkpoint.hpp).
//
//   mg::nn::Sequential net(mg::nn::Checkpoint(block1), mg::nn::Checkpoint(block2), head);
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

}  // namespace mixgrad::nn
