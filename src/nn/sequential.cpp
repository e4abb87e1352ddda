#include "mixgrad/nn/sequential.hpp"

namespace mixgrad::nn {

Sequential& Sequential::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(size()), std::move(module));
  return *this;
}

const std::shared_ptr<Module>& Sequential::child(size_t i) const {
  if (i >= size())
    throw ShapeError("Sequential: index " + std::to_string(i) + " out of range for " + std::to_string(size()) +
                     " modules");
  return named_children()[i].second;
}

Module& Sequential::operator[](size_t i) const { return *child(i); }

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (const auto& [name, module] : named_children()) x = module->forward(x);
  return x;
}

}  // namespace mixgrad::nn
