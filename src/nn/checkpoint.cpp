#include "mixgrad/nn/checkpoint.hpp"

#include "mixgrad/autodiff/checkpoint.hpp"

namespace mixgrad::nn {

Checkpoint::Checkpoint(std::shared_ptr<Module> module) {
  if (!module) throw StateError("nn::Checkpoint: null module");
  module_ = register_module("module", std::move(module));
}

Tensor Checkpoint::forward(const Tensor& x) {
  Module& inner = *module_;
  const auto run = [&inner](const Tensor& in) {
    if (!autodiff::is_recomputing()) return inner(in);
    // The recomputation must not update running statistics a second time.
    StateDict buffers;
    for (const auto& [name, b] : inner.named_buffers()) buffers.insert(name, b.clone());
    Tensor out = inner(in);
    inner.load_state_dict(buffers, {.strict = false});
    return out;
  };
  return autodiff::checkpoint(run, x, {.name = "nn::Checkpoint(" + inner.describe() + ")"});
}

std::string Checkpoint::describe() const { return "Checkpoint(" + module_->describe() + ")"; }

}  // namespace mixgrad::nn
