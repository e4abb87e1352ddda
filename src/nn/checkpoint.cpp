#include "mixgrad/nn/checkpoint.hpp"

#include <functional>

#include "mixgrad/autodiff/checkpoint.hpp"
#include "mixgrad/autodiff/dtr.hpp"

namespace mixgrad::nn {

Checkpoint::Checkpoint(std::shared_ptr<Module> module) {
  if (!module) throw StateError("nn::Checkpoint: null module");
  module_ = register_module("module", std::move(module));
}

namespace {

// The module's forward, except that a recomputation leaves its buffers (batch
// norm's running statistics) as the first run left them.
std::function<Tensor(const Tensor&)> once_updating(Module& inner) {
  return [&inner](const Tensor& in) {
    if (!autodiff::is_recomputing()) return inner(in);
    StateDict buffers;
    for (const auto& [name, b] : inner.named_buffers()) buffers.insert(name, b.clone());
    Tensor out = inner(in);
    inner.load_state_dict(buffers, {.strict = false});
    return out;
  };
}

}  // namespace

Tensor Checkpoint::forward(const Tensor& x) {
  return autodiff::checkpoint(once_updating(*module_), x, {.name = "nn::Checkpoint(" + module_->describe() + ")"});
}

std::string Checkpoint::describe() const { return "Checkpoint(" + module_->describe() + ")"; }

Segment::Segment(std::shared_ptr<Module> module) {
  if (!module) throw StateError("nn::Segment: null module");
  module_ = register_module("module", std::move(module));
}

Tensor Segment::forward(const Tensor& x) {
  return dtr::segment(once_updating(*module_), x, "nn::Segment(" + module_->describe() + ")");
}

std::string Segment::describe() const { return "Segment(" + module_->describe() + ")"; }

}  // namespace mixgrad::nn
