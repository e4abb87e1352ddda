// mixgrad/nn/module.hpp — the base of every layer and model.
//
// A Module owns named parameters (trained tensors), named buffers (state that
// is saved but not trained, such as batch-norm running statistics) and named
// child modules, and turns an input tensor into an output in `forward`.
// Parameters and buffers are Tensor handles: the optimizer, the GradManager
// and the module all see the same storage, and load_state_dict copies values
// into it rather than replacing it.
//
//   struct Mlp : mg::nn::Module {
//     std::shared_ptr<mg::nn::Linear> fc1 = register_module("fc1", mg::nn::Linear(784, 128));
//     std::shared_ptr<mg::nn::Linear> fc2 = register_module("fc2", mg::nn::Linear(128, 10));
//     mg::Tensor scale = register_parameter("scale", mg::ones({1}));
//     mg::Tensor forward(const mg::Tensor& x) override {
//       return (*fc2)(mg::F::relu((*fc1)(x))) * scale;
//     }
//   };
//   Mlp net;
//   gm.attach(net.parameters());               // scale, fc1.weight, fc1.bias, fc2.weight, fc2.bias
//   auto sd = net.state_dict();                // {"scale", "fc1.weight", ...}
//   net.eval();                                // every child too
//   net.to(mg::Device::cuda(0));               // before creating the optimizer
//
// Surgery and fine-tuning, as PyTorch's code does them (docs/training.md,
// "Fine-tuning: model surgery and freezing"):
//
//   net["fc2"] = mg::nn::Linear(128, 5);      // torch: net.fc2 = nn.Linear(128, 5); "fc2.weight" is [5, 128]
//   net["fc1"].freeze();                       // torch: requires_grad_(False) on its parameters
//   gm.attach(net.trainable_parameters());     // what is left to train: scale, fc2.weight, fc2.bias
//   model["classifier"][6] = mg::nn::Linear(4096, 10);   // a Sequential child's element: by name, then index
//
// A child reached through a typed member (fc1, fc2 above) is replaced by a
// module of the same type, moved into the old object so the member sees it;
// a Sequential's elements take any module (see replace_child). A frozen
// parameter gets no gradient from any GradManager, attached or not (see
// mixgrad/autodiff/freeze.hpp).
//
// Modules are moved, not copied (a copy would silently share parameters);
// containers hold them through std::shared_ptr.
#pragma once

#include <concepts>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "mixgrad/state_dict.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::nn {

class Module;
class ModuleRef;

using NamedTensor = std::pair<std::string, Tensor>;
using NamedModule = std::pair<std::string, std::shared_ptr<Module>>;

struct LoadStateDictOptions {
  /// When true, a key the module lacks or a tensor the dict lacks is an
  /// error; when false such keys are ignored (shapes and dtypes are still
  /// checked for the keys both have).
  bool strict = true;
};

/// Options of Module::to(DType, ToOptions).
struct ToOptions {
  /// Leave the parameters and buffers of every BatchNorm2d in float32
  /// (apex's `keep_batchnorm_fp32`): batch norm computes its statistics in
  /// float32 whatever its input, and 16-bit running statistics and affine
  /// parameters would lose the small updates they accumulate.
  bool keep_batch_norm_fp32 = false;
};

/// The casts Module::operator() applies around forward(): apex's patched
/// forward, so that a model with 16-bit weights takes a float32 batch and
/// hands back a float32 result (amp::initialize sets them under O0, O2 and
/// O3). Only floating tensors are cast (integer ids pass as they are), by
/// recorded F::astype calls, so gradients flow through them. A direct call
/// of forward() applies none.
struct CallCasts {
  /// The dtype a floating input is cast to before forward(); nullopt: none.
  std::optional<DType> input = std::nullopt;
  /// The dtype a floating output is cast to after forward(); nullopt: none.
  std::optional<DType> output = std::nullopt;
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Module(Module&&) noexcept = default;

  /// The computation of the module.
  virtual Tensor forward(const Tensor& input) = 0;
  /// forward(input) with the call casts around it (none by default): `net(x)`.
  Tensor operator()(const Tensor& input) {
    return call_casts_.input || call_casts_.output ? call_with_casts(input) : forward(input);
  }
  /// Sets the casts operator() applies around forward() (see CallCasts);
  /// `{}` removes them. Throws DTypeError, changing nothing, for a dtype that
  /// is not floating. They belong to this module, not to its children.
  /// Returns *this.
  Module& set_call_casts(const CallCasts& casts);
  const CallCasts& call_casts() const { return call_casts_; }

  /// Every parameter of this module and its descendants, in registration
  /// order (own parameters first, then each child's, depth first). A tensor
  /// registered twice (shared weights) appears once.
  std::vector<Tensor> parameters() const;
  /// As parameters(), with dotted names ("0.weight", "fc1.bias").
  std::vector<NamedTensor> named_parameters() const;
  /// Every buffer (saved, not trained) of this module and its descendants.
  std::vector<Tensor> buffers() const;
  std::vector<NamedTensor> named_buffers() const;
  /// The direct children, in registration order.
  std::vector<std::shared_ptr<Module>> children() const;
  const std::vector<NamedModule>& named_children() const { return children_; }

  /// The direct child registered as `name`. Throws ValueError, naming the
  /// children there are, for an unknown name.
  std::shared_ptr<Module> child(const std::string& name) const;
  /// The child `name` as a ModuleRef, to use or to replace: `net["fc"](x)`,
  /// `net["classifier"][6] = nn::Linear(4096, 10)`, `net["fc"] = nn::Linear(512, 10)`.
  /// Throws as child() does.
  ModuleRef operator[](const std::string& name);
  /// Replaces the child `name` by `module` (moved in), keeping its name and
  /// place, so its parameters take the old ones' state-dict names
  /// ("fc.weight"). The new child takes this module's training mode. Returns
  /// the child now in place. In a container whose forward() runs through its
  /// child list (Sequential) any module may take the place; elsewhere
  /// forward() reaches the child through a typed member (`std::shared_ptr<Linear>
  /// fc`), so the new module must be of the old one's exact type and is
  /// moved into the old object: the member, and any other holder of that
  /// object, sees the new layer. Throws ValueError, changing nothing, for an
  /// unknown name or a module of another type.
  template <std::derived_from<Module> M>
  std::shared_ptr<M> replace_child(const std::string& name, M module) {
    const size_t i = child_index(name, "replace_child");
    if (holds_children_by_list()) {
      auto p = std::make_shared<M>(std::move(module));
      set_child(i, p);
      return p;
    }
    Module& old = *children_[i].second;
    check_same_type(i, typeid(M), module.describe());
    if constexpr (std::is_move_assignable_v<M>) {
      static_cast<M&>(old) = std::move(module);
      old.train(training_);
      return std::static_pointer_cast<M>(children_[i].second);
    } else {
      refuse_shared_replacement(i);  // a module that cannot be moved into the old one
    }
  }
  /// Replaces the child `name` by a shared module. Only in a container whose
  /// forward() runs through its child list (Sequential); elsewhere throws
  /// ValueError (pass the module by value, to be moved into the old one).
  template <std::derived_from<Module> M>
  std::shared_ptr<M> replace_child(const std::string& name, std::shared_ptr<M> module) {
    const size_t i = child_index(name, "replace_child");
    if (!holds_children_by_list()) refuse_shared_replacement(i);
    set_child(i, module);
    return module;
  }

  /// Freezes every parameter of this module and its descendants
  /// (autodiff::freeze): no GradManager computes or stores their gradients,
  /// attached or not, and their gradients are dropped now. PyTorch's
  /// `requires_grad_(False)`. Throws StateError, changing nothing, while a
  /// GradManager records on this thread. Returns *this.
  Module& freeze();
  /// Makes every parameter of this module and its descendants trainable
  /// again (autodiff::unfreeze). Returns *this.
  Module& unfreeze();
  /// The parameters that are not frozen, in parameters() order: what a
  /// fine-tuning loop attaches and optimizes.
  std::vector<Tensor> trainable_parameters() const;
  std::vector<NamedTensor> named_trainable_parameters() const;

  /// Sets training mode (`mode`) on this module and every descendant; layers
  /// such as BatchNorm2d and Dropout behave differently in each. Returns *this.
  Module& train(bool mode = true);
  /// Same as train(false).
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }

  /// Moves every parameter and buffer (of this module and its descendants),
  /// and their gradients, to `device`, in place: each keeps its identity
  /// (the same Tensor handles and ids), so handles held elsewhere — a
  /// GradManager's attachments, a layer's members — see the moved tensor.
  /// Optimizer state is not moved: call to() before creating the optimizer
  /// (as PyTorch advises). Views that shared storage no longer do. Throws
  /// DeviceError, before anything moves, for a device this build or machine
  /// does not have; an allocation failure also leaves the module unchanged.
  /// Returns *this.
  Module& to(Device device);
  /// Casts every floating parameter and buffer, and their gradients, to the
  /// floating `dtype`, in place like to(Device); integer buffers (a step
  /// counter) keep their dtype. Throws DTypeError, changing nothing, for a
  /// non-floating `dtype`. Optimizer state is not cast: call before creating
  /// the optimizer. Returns *this.
  Module& to(DType dtype);
  /// As to(dtype), with options: `net.to(DType::bfloat16,
  /// {.keep_batch_norm_fp32 = true})` gives apex's O2 model (16-bit weights,
  /// float32 batch norm); pair it with an optimizer built with
  /// `{.master_weights = true}` (see docs/apex.md).
  Module& to(DType dtype, const ToOptions& options);
  /// Lays every parameter and buffer (and gradient) of the format's rank out
  /// in `format`, in place like to(Device): channels_last the 4-d ones
  /// (conv weights), channels_last_3d the 5-d ones, contiguous all. Values,
  /// shapes, names and identities stay, so state_dict() is unchanged and the
  /// optimizer and GradManager see the new layout. Returns *this.
  Module& to(MemoryFormat format);

  /// Snapshots (copies) of every parameter and buffer under its dotted name,
  /// parameters before buffers at each level, as PyTorch names them.
  StateDict state_dict() const;
  /// Copies the values of `dict` into this module's parameters and buffers.
  /// Everything is checked before anything is copied: missing or unexpected
  /// keys (ValueError, when strict), a different shape (ShapeError) or dtype
  /// (DTypeError) leave the module untouched.
  void load_state_dict(const StateDict& dict, const LoadStateDictOptions& options = {});
  /// The checks of load_state_dict alone: throws what it would throw and
  /// changes nothing (to validate several objects before loading any).
  void check_state_dict(const StateDict& dict, const LoadStateDictOptions& options = {}) const;

  /// A one-line description of this module alone ("Linear(in_features=784,
  /// out_features=128, bias=true)"); operator<< prints the whole tree.
  virtual std::string describe() const { return "Module"; }

 protected:
  /// Protected so that a module cannot be assigned through a Module& (which
  /// would move the base part alone); a layer's own assignment uses it.
  Module& operator=(Module&&) noexcept = default;

  /// Registers a trained tensor under `name` (no dots, unique within this
  /// module) and returns the same handle. Throws StateError for an undefined
  /// tensor, DTypeError for a non-floating one, ValueError for a bad or taken name.
  Tensor register_parameter(std::string name, Tensor tensor);
  /// Registers a saved but untrained tensor (any dtype) and returns it.
  Tensor register_buffer(std::string name, Tensor tensor);
  /// Takes ownership of `module` as a child named `name`; returns it.
  template <std::derived_from<Module> M>
  std::shared_ptr<M> register_module(std::string name, M module) {
    auto p = std::make_shared<M>(std::move(module));
    add_child(std::move(name), p);
    return p;
  }
  /// Adds an existing module (which may be shared with other parents).
  template <std::derived_from<Module> M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    add_child(std::move(name), module);
    return module;
  }

  /// True for a container whose forward() reaches its children through the
  /// child list (Sequential): replace_child may then put a module of any type
  /// in a child's place. False by default: forward() holds typed members.
  virtual bool holds_children_by_list() const { return false; }
  /// The position of child `name`; throws ValueError naming `call` and the children.
  size_t child_index(const std::string& name, const char* call) const;
  /// Puts `child` at position i (same name), in this module's training mode.
  void set_child(size_t i, std::shared_ptr<Module> child);
  /// Replaces the whole child list (a container's insertion renames its
  /// children); names and modules are checked first, a throw changes nothing.
  void set_children(std::vector<NamedModule> children);
  /// The name of element `index` for ModuleRef's `[index]`; a module that is
  /// not a container throws ValueError. Sequential counts from the back for
  /// a negative index.
  virtual std::string element_name(int64_t index, const char* call) const;

 private:
  friend class ModuleRef;
  void check_same_type(size_t i, const std::type_info& type, const std::string& what) const;
  [[noreturn]] void refuse_shared_replacement(size_t i) const;
  std::string children_list() const;
  void add_child(std::string name, std::shared_ptr<Module> child);
  void check_new_name(const std::string& name, const char* what) const;
  void collect(const std::string& prefix, bool params, std::vector<NamedTensor>& out) const;
  void collect_state(const std::string& prefix, StateDict& out) const;
  std::vector<Tensor> unique_tensors() const;
  std::vector<std::pair<Tensor, Tensor>> checked_copies(const StateDict& dict,
                                                        const LoadStateDictOptions& options) const;

  Tensor call_with_casts(const Tensor& input);

  bool training_ = true;
  CallCasts call_casts_;
  std::vector<NamedTensor> parameters_;
  std::vector<NamedTensor> buffers_;
  std::vector<NamedModule> children_;
};

/// A child of a module, by its parent and its name, as `net["fc"]` and
/// `seq[6]` return it: it reads the child at each use and assigning a module
/// to it replaces the child (Module::replace_child):
///
///   net["classifier"][6] = nn::Linear(4096, 10);    // torch: net.classifier[6] = nn.Linear(4096, 10)
///   auto y = net["features"](x);                   // call it
///   net["fc"]->parameters();                       // any Module member, through ->
///   auto fc = net["fc"].as<nn::Linear>();          // typed: std::shared_ptr<Linear>
///
/// It refers to its parent, which must outlive it; copying one refers to the
/// same child, and assigning one ModuleRef to another does not compile (to
/// share a module, assign `other.ptr()`).
class ModuleRef {
 public:
  ModuleRef(Module& parent, std::string name) : parent_(&parent), name_(std::move(name)) {}
  ModuleRef(const ModuleRef&) = default;
  ModuleRef& operator=(const ModuleRef&) = delete;

  /// The child now in place.
  std::shared_ptr<Module> ptr() const { return parent_->child(name_); }
  Module& get() const { return *parent_->child(name_); }
  operator Module&() const { return get(); }
  Module* operator->() const { return &get(); }
  /// The child as an M; throws StateError when it is not one (as Sequential::at).
  template <std::derived_from<Module> M>
  std::shared_ptr<M> as() const {
    auto p = std::dynamic_pointer_cast<M>(ptr());
    if (!p) throw StateError("ModuleRef::as: '" + name_ + "' is " + get().describe());
    return p;
  }
  const std::string& name() const { return name_; }

  /// Calls the child: `net["features"](x)`.
  Tensor operator()(const Tensor& input) const { return get()(input); }
  /// A child of the child, by name.
  ModuleRef operator[](const std::string& name) const { return get()[name]; }
  /// An element of the child, which must be a container (Sequential): `net["classifier"][6]`.
  ModuleRef operator[](int64_t index) const {
    Module& m = get();
    return ModuleRef(m, m.element_name(index, "operator[]"));
  }

  /// Replaces the child by `module` (see Module::replace_child).
  template <std::derived_from<Module> M>
  ModuleRef& operator=(M module) {
    parent_->replace_child(name_, std::move(module));
    return *this;
  }
  template <std::derived_from<Module> M>
  ModuleRef& operator=(std::shared_ptr<M> module) {
    parent_->replace_child(name_, std::move(module));
    return *this;
  }

  /// The child's most used members, without -> (every other one through ->).
  std::vector<Tensor> parameters() const { return get().parameters(); }
  std::vector<NamedTensor> named_parameters() const { return get().named_parameters(); }
  std::vector<Tensor> trainable_parameters() const { return get().trainable_parameters(); }
  StateDict state_dict() const { return get().state_dict(); }
  Module& freeze() const { return get().freeze(); }
  Module& unfreeze() const { return get().unfreeze(); }
  bool is_training() const { return get().is_training(); }
  std::string describe() const { return get().describe(); }

 private:
  Module* parent_;
  std::string name_;
};

inline ModuleRef Module::operator[](const std::string& name) {
  return ModuleRef(*this, children_[child_index(name, "operator[]")].first);
}

/// Prints the module tree, one module per line, children indented.
std::ostream& operator<<(std::ostream& os, const Module& module);

}  // namespace mixgrad::nn
