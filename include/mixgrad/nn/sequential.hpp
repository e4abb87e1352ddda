// mixgrad/nn/sequential.hpp — a chain of modules, each fed the previous one's
// output. Children are named "0", "1", ... so parameters read "0.weight".
//
//   auto net = mg::nn::Sequential(mg::nn::Linear(784, 128), mg::nn::ReLU(), mg::nn::Linear(128, 10));
//   net.push_back(mg::nn::Dropout(0.1));
//   auto logits = net(x);
//   net.size();                               // 4
//   net[0].parameters();                      // the first Linear's weight and bias
//   auto fc = net.at<mg::nn::Linear>(2);      // typed access: std::shared_ptr<Linear>
//
// Modules are passed by value (temporaries, or std::move of a named one) or as
// std::shared_ptr to share one module between containers.
#pragma once

#include <concepts>
#include <memory>
#include <type_traits>

#include "mixgrad/nn/module.hpp"

namespace mixgrad::nn {

namespace detail {
template <class T>
struct is_module_ptr : std::false_type {};
template <class M>
struct is_module_ptr<std::shared_ptr<M>> : std::bool_constant<std::derived_from<M, Module>> {};
template <class T>
concept ModuleArg = std::derived_from<std::remove_cvref_t<T>, Module> || is_module_ptr<std::remove_cvref_t<T>>::value;
}  // namespace detail

class Sequential : public Module {
 public:
  Sequential() = default;
  /// The modules in order, each by value (moved in) or as a shared_ptr.
  template <detail::ModuleArg... M>
    requires(sizeof...(M) > 0)
  explicit Sequential(M&&... modules) {
    (push_back(std::forward<M>(modules)), ...);
  }

  /// Appends a module (moved in); returns *this.
  template <std::derived_from<Module> M>
  Sequential& push_back(M&& module) {
    static_assert(!std::is_lvalue_reference_v<M>,
                  "Sequential takes modules by value: pass a temporary, std::move(module), or a std::shared_ptr");
    return push_back(std::shared_ptr<Module>(std::make_shared<std::remove_cvref_t<M>>(std::move(module))));
  }
  /// Appends a shared module; returns *this.
  Sequential& push_back(std::shared_ptr<Module> module);
  template <std::derived_from<Module> M>
  Sequential& push_back(std::shared_ptr<M> module) {
    return push_back(std::shared_ptr<Module>(std::move(module)));
  }

  size_t size() const { return named_children().size(); }
  bool empty() const { return size() == 0; }
  /// The i-th module; throws ShapeError when i >= size().
  Module& operator[](size_t i) const;
  /// The i-th module as an M; throws ShapeError when out of range and
  /// StateError when it is not an M.
  template <std::derived_from<Module> M>
  std::shared_ptr<M> at(size_t i) const {
    auto p = std::dynamic_pointer_cast<M>(child(i));
    if (!p) throw StateError("Sequential::at: module " + std::to_string(i) + " is " + child(i)->describe());
    return p;
  }

  /// Applies the modules in order; the identity when empty.
  Tensor forward(const Tensor& input) override;
  std::string describe() const override { return "Sequential"; }

 private:
  const std::shared_ptr<Module>& child(size_t i) const;
};

}  // namespace mixgrad::nn
