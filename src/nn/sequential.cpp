#include "mixgrad/nn/sequential.hpp"

namespace mixgrad::nn {

Sequential& Sequential::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(size()), std::move(module));
  return *this;
}

size_t Sequential::position(int64_t i, const char* call, size_t extra) const {
  const auto n = static_cast<int64_t>(size());
  const int64_t p = i < 0 ? i + n : i;
  if (p < 0 || p >= n + static_cast<int64_t>(extra))
    throw ShapeError("Sequential::" + std::string(call) + ": index " + std::to_string(i) + " out of range for " +
                     std::to_string(n) + " modules");
  return static_cast<size_t>(p);
}

const std::shared_ptr<Module>& Sequential::element(int64_t i, const char* call) const {
  return named_children()[position(i, call)].second;
}

std::string Sequential::element_name(int64_t index, const char* call) const {
  return named_children()[position(index, call)].first;
}

// Python's list.insert within bounds (torch's Sequential.insert); the
// children after i are renamed so that names stay their positions.
Sequential& Sequential::insert(int64_t i, std::shared_ptr<Module> module) {
  // i == size() appends; a negative i counts from the back, so -size() is the front.
  const size_t at = i < 0 ? position(i, "insert") : position(i, "insert", 1);
  if (!module) throw StateError("Sequential::insert: the module is null");
  std::vector<NamedModule> children = named_children();
  children.insert(children.begin() + static_cast<std::ptrdiff_t>(at), {std::string(), std::move(module)});
  for (size_t k = 0; k < children.size(); ++k) children[k].first = std::to_string(k);
  set_children(std::move(children));
  return *this;
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (const auto& [name, module] : named_children()) x = module->forward(x);
  return x;
}

}  // namespace mixgrad::nn
