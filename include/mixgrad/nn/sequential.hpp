// mixgrad/nn/sequential.hpp — a chain of modules, each fed the previous one's
// output. Children are named "0", "1", ... so parameters read "0.weight".
//
//   auto net = mg::nn::Sequential(mg::nn::Linear(784, 128), mg::nn::ReLU(), mg::nn::Linear(128, 10));
//   net.push_back(mg::nn::Dropout(0.1));      // also append(), PyTorch's name
//   auto logits = net(x);
//   net.size();                               // 4
//   net[0].parameters();                      // the first Linear's weight and bias
//   net[-1];                                  // the last module, as in Python
//   auto fc = net.at<mg::nn::Linear>(2);      // typed access: std::shared_ptr<Linear>
//
// Surgery, as PyTorch's fine-tuning code does it; names follow the places,
// so the state dict reads as torch's:
//
//   net[2] = mg::nn::Linear(128, 5);          // "2.weight" is now [5, 128]
//   net.insert(1, mg::nn::LayerNorm(128));    // the ReLU and what follows move up: "3.weight"
//
// An index out of range throws ShapeError naming the call, the index and the
// size, and changes nothing. A module replaced or inserted takes the
// container's training mode; optimizers and GradManagers hold tensors, so
// attach and optimize the new parameters (net.trainable_parameters()) after
// the surgery.
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

  /// Appends a module: push_back under PyTorch's name.
  template <class M>
    requires detail::ModuleArg<M>
  Sequential& append(M&& module) {
    return push_back(std::forward<M>(module));
  }
  /// Inserts a module before position i (-size() <= i <= size(); negative
  /// counts from the back, as Python's); the modules from i on move up one
  /// place, and so do their names ("3.weight" becomes "4.weight"). Throws
  /// ShapeError, changing nothing, out of range. Returns *this.
  template <std::derived_from<Module> M>
  Sequential& insert(int64_t i, M&& module) {
    static_assert(!std::is_lvalue_reference_v<M>,
                  "Sequential takes modules by value: pass a temporary, std::move(module), or a std::shared_ptr");
    return insert(i, std::shared_ptr<Module>(std::make_shared<std::remove_cvref_t<M>>(std::move(module))));
  }
  Sequential& insert(int64_t i, std::shared_ptr<Module> module);
  template <std::derived_from<Module> M>
  Sequential& insert(int64_t i, std::shared_ptr<M> module) {
    return insert(i, std::shared_ptr<Module>(std::move(module)));
  }

  size_t size() const { return named_children().size(); }
  bool empty() const { return size() == 0; }
  /// The i-th module (negative i counts from the back), to use or to replace:
  /// `net[6] = nn::Linear(4096, 10)` puts a new module in its place under
  /// the same name. Throws ShapeError, naming the index and the size, out of range.
  ModuleRef operator[](int64_t i) { return ModuleRef(*this, element_name(i, "operator[]")); }
  /// The i-th module of a const Sequential.
  Module& operator[](int64_t i) const { return *element(i); }
  /// A child by name ("0", "1", ...), as every Module has.
  using Module::operator[];
  /// The i-th module as an M; throws ShapeError when out of range and
  /// StateError when it is not an M.
  template <std::derived_from<Module> M>
  std::shared_ptr<M> at(int64_t i) const {
    const std::shared_ptr<Module>& m = element(i, "at");
    auto p = std::dynamic_pointer_cast<M>(m);
    if (!p) throw StateError("Sequential::at: module " + std::to_string(i) + " is " + m->describe());
    return p;
  }

  /// Applies the modules in order; the identity when empty.
  Tensor forward(const Tensor& input) override;
  std::string describe() const override { return "Sequential"; }

 protected:
  bool holds_children_by_list() const override { return true; }
  std::string element_name(int64_t index, const char* call) const override;

 private:
  const std::shared_ptr<Module>& element(int64_t i, const char* call = "operator[]") const;
  /// i as a position in [0, size() + extra), negative counting from the back;
  /// throws ShapeError naming `call`.
  size_t position(int64_t i, const char* call, size_t extra = 0) const;
};

}  // namespace mixgrad::nn
