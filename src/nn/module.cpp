#include "mixgrad/nn/module.hpp"

#include <unordered_set>

#include "hooks/op_hooks.hpp"
#include "mixgrad/autodiff/freeze.hpp"
#include "mixgrad/cuda.hpp"
#include "mixgrad/nn/batch_norm.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "core/checks.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::nn {

namespace {

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// Lists keys a few at a time so an error about a whole mismatched model
// stays readable.
std::string key_list(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 8;
  std::string s;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) s += (i ? ", '" : "'") + keys[i] + "'";
  if (keys.size() > kShown) s += " and " + std::to_string(keys.size() - kShown) + " more";
  return s;
}

}  // namespace

void Module::check_new_name(const std::string& name, const char* what) const {
  if (name.empty() || name.find('.') != std::string::npos)
    throw ValueError(std::string("Module::") + what + ": invalid name '" + name + "' (must be non-empty, without '.')");
  auto taken = [&](const auto& list) {
    for (const auto& item : list)
      if (item.first == name) return true;
    return false;
  };
  if (taken(parameters_) || taken(buffers_) || taken(children_))
    throw ValueError(std::string("Module::") + what + ": name '" + name + "' is already registered");
}

Tensor Module::register_parameter(std::string name, Tensor tensor) {
  check_new_name(name, "register_parameter");
  if (!tensor.defined()) throw StateError("Module::register_parameter: '" + name + "' is undefined");
  if (!is_floating_point(tensor.dtype()))
    throw DTypeError("Module::register_parameter: '" + name + "' must be floating to be trained, got " +
                     core::describe(tensor));
  parameters_.emplace_back(std::move(name), tensor);
  return tensor;
}

Tensor Module::register_buffer(std::string name, Tensor tensor) {
  check_new_name(name, "register_buffer");
  if (!tensor.defined()) throw StateError("Module::register_buffer: '" + name + "' is undefined");
  buffers_.emplace_back(std::move(name), tensor);
  return tensor;
}

void Module::add_child(std::string name, std::shared_ptr<Module> child) {
  check_new_name(name, "register_module");
  if (!child) throw StateError("Module::register_module: '" + name + "' is null");
  child->train(training_);
  children_.emplace_back(std::move(name), std::move(child));
}

void Module::collect(const std::string& prefix, bool params, std::vector<NamedTensor>& out) const {
  for (const auto& [name, t] : params ? parameters_ : buffers_) out.emplace_back(join(prefix, name), t);
  for (const auto& [name, child] : children_) child->collect(join(prefix, name), params, out);
}

std::vector<NamedTensor> Module::named_parameters() const {
  std::vector<NamedTensor> all;
  collect("", true, all);
  // Shared weights (one tensor under two names) are trained once.
  std::unordered_set<const TensorImpl*> seen;
  std::vector<NamedTensor> out;
  for (auto& item : all)
    if (seen.insert(item.second.impl()).second) out.push_back(std::move(item));
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(std::move(t));
  return out;
}

std::vector<NamedTensor> Module::named_buffers() const {
  std::vector<NamedTensor> all;
  collect("", false, all);
  std::unordered_set<const TensorImpl*> seen;
  std::vector<NamedTensor> out;
  for (auto& item : all)
    if (seen.insert(item.second.impl()).second) out.push_back(std::move(item));
  return out;
}

std::vector<Tensor> Module::buffers() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_buffers()) out.push_back(std::move(t));
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  out.reserve(children_.size());
  for (const auto& [name, child] : children_) out.push_back(child);
  return out;
}

std::string Module::children_list() const {
  if (children_.empty()) return "it has no children";
  std::vector<std::string> names;
  for (const auto& [name, child] : children_) names.push_back(name);
  return "its children: " + key_list(names);
}

size_t Module::child_index(const std::string& name, const char* call) const {
  for (size_t i = 0; i < children_.size(); ++i)
    if (children_[i].first == name) return i;
  throw ValueError(std::string("Module::") + call + ": " + describe() + " has no child '" + name + "'; " +
                   children_list());
}

std::shared_ptr<Module> Module::child(const std::string& name) const {
  return children_[child_index(name, "child")].second;
}

void Module::set_child(size_t i, std::shared_ptr<Module> child) {
  if (!child) throw StateError("Module::replace_child: the module for '" + children_.at(i).first + "' is null");
  child->train(training_);
  children_.at(i).second = std::move(child);
}

void Module::set_children(std::vector<NamedModule> children) {
  std::unordered_set<std::string> names;
  for (const auto& [name, child] : children) {
    if (name.empty() || name.find('.') != std::string::npos || !names.insert(name).second)
      throw ValueError("Module::set_children: invalid or repeated name '" + name + "'");
    if (!child) throw StateError("Module::set_children: '" + name + "' is null");
    for (const auto& item : parameters_)
      if (item.first == name) throw ValueError("Module::set_children: '" + name + "' names a parameter");
    for (const auto& item : buffers_)
      if (item.first == name) throw ValueError("Module::set_children: '" + name + "' names a buffer");
  }
  for (auto& [name, child] : children) child->train(training_);
  children_ = std::move(children);
}

std::string Module::element_name(int64_t index, const char* call) const {
  throw ValueError("Module::" + std::string(call) + ": " + describe() + " is not a container, it has no element " +
                   std::to_string(index) + "; name a child instead (" + children_list() + ")");
}

void Module::check_same_type(size_t i, const std::type_info& type, const std::string& what) const {
  const Module& old = *children_[i].second;
  if (typeid(old) == type) return;
  throw ValueError("Module::replace_child: '" + children_[i].first + "' of " + describe() + " is " + old.describe() +
                   ", which its forward() holds as that type; " + what +
                   " cannot take its place (only a container such as Sequential takes a module of another type)");
}

void Module::refuse_shared_replacement(size_t i) const {
  throw ValueError("Module::replace_child: '" + children_[i].first + "' of " + describe() +
                   " is held by its forward() as a typed member: pass a module of the same type by value, to be "
                   "moved into the old one");
}

Module& Module::freeze() {
  autodiff::freeze(parameters());
  return *this;
}

Module& Module::unfreeze() {
  autodiff::unfreeze(parameters());
  return *this;
}

std::vector<NamedTensor> Module::named_trainable_parameters() const {
  std::vector<NamedTensor> out = named_parameters();
  std::erase_if(out, [](const NamedTensor& item) { return autodiff::is_frozen(item.second); });
  return out;
}

std::vector<Tensor> Module::trainable_parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_trainable_parameters()) out.push_back(std::move(t));
  return out;
}

Module& Module::train(bool mode) {
  training_ = mode;
  for (auto& [name, child] : children_) child->train(mode);
  return *this;
}

// PyTorch's order: at each level own parameters, own buffers, then children.
void Module::collect_state(const std::string& prefix, StateDict& out) const {
  for (const auto& [name, t] : parameters_) out.insert(join(prefix, name), t.detach().clone());
  for (const auto& [name, t] : buffers_) out.insert(join(prefix, name), t.detach().clone());
  for (const auto& [name, child] : children_) child->collect_state(join(prefix, name), out);
}

StateDict Module::state_dict() const {
  autodiff::NoRecordScope no_record;
  StateDict out;
  collect_state("", out);
  return out;
}

// Validates `dict` against this module; returns the (source, destination)
// pairs to copy.
std::vector<std::pair<Tensor, Tensor>> Module::checked_copies(const StateDict& dict,
                                                              const LoadStateDictOptions& options) const {
  std::vector<NamedTensor> targets;
  collect("", true, targets);
  collect("", false, targets);

  // Validate everything first: a failed load must not leave a half-loaded model.
  std::vector<std::string> missing, unexpected;
  std::unordered_set<std::string> expected;
  std::vector<std::pair<Tensor, Tensor>> copies;  // (source, destination)
  for (const auto& [name, dst] : targets) {
    expected.insert(name);
    const Tensor* src = dict.find(name);
    if (!src) {
      missing.push_back(name);
      continue;
    }
    if (src->shape() != dst.shape())
      throw ShapeError("Module::load_state_dict: '" + name + "' is " + core::describe(*src) +
                       " in the state dict but " + core::describe(dst) + " in the module");
    if (src->dtype() != dst.dtype())
      throw DTypeError("Module::load_state_dict: '" + name + "' is " + core::describe(*src) +
                       " in the state dict but " + core::describe(dst) + " in the module");
    copies.emplace_back(*src, dst);
  }
  for (const auto& [key, t] : dict)
    if (!expected.contains(key)) unexpected.push_back(key);
  if (options.strict && (!missing.empty() || !unexpected.empty())) {
    std::string msg = "Module::load_state_dict: state dict does not match the module;";
    if (!missing.empty()) msg += " missing keys: " + key_list(missing) + ";";
    if (!unexpected.empty()) msg += " unexpected keys: " + key_list(unexpected) + ";";
    msg += " nothing was loaded";
    throw ValueError(msg);
  }
  return copies;
}

std::vector<Tensor> Module::unique_tensors() const {
  std::vector<Tensor> out;
  std::unordered_set<const TensorImpl*> seen;
  for (const auto& [name, t] : named_parameters())
    if (seen.insert(t.impl()).second) out.push_back(t);
  for (const auto& [name, t] : named_buffers())
    if (seen.insert(t.impl()).second) out.push_back(t);
  return out;
}

namespace {

// Converts every tensor (and its gradient) with `convert`, which returns a
// contiguous copy or the same handle; only when all conversions have
// succeeded are the new storages put into the existing TensorImpls, so
// every handle keeps its identity and a throw changes nothing.
template <class Convert>
void replace_in_place(const std::vector<Tensor>& tensors, Convert&& convert) {
  struct Change {
    Tensor target, value, grad;
  };
  std::vector<Change> changes;
  {
    autodiff::NoRecordScope no_record;
    for (const Tensor& t : tensors) {
      Tensor value = convert(t);
      Tensor grad = t.grad().defined() ? convert(t.grad()) : Tensor();
      const bool grad_changed = grad.defined() && grad.impl() != t.grad().impl();
      if (value.impl() != t.impl() || grad_changed) changes.push_back({t, value, grad_changed ? grad : Tensor()});
    }
  }
  for (auto& [target, value, grad] : changes) {
    TensorImpl& impl = *target.impl();
    if (value.impl() != target.impl()) {
      impl.storage = value.impl()->storage;
      impl.offset = value.impl()->offset;
      impl.strides = value.impl()->strides;
      impl.dtype = value.dtype();
      target.bump_version();  // caches derived from the values (autocast's casts) are stale
    }
    if (grad.defined()) impl.grad = grad;
  }
}

// Saved tensors on a tape are the module's handles: changing them under a
// recording would change what its backward computes with.
void check_not_recording(const char* op) {
  if (!autodiff::detail::recording_managers().empty())
    throw StateError(std::string(op) + ": called while a GradManager records; call it before record() or after backward()");
}

}  // namespace

Module& Module::to(Device device) {
  check_not_recording("Module::to");
  const std::vector<Tensor> tensors = unique_tensors();
  if (device.is_cuda()) {
    if (!cuda::is_built())
      throw DeviceError("Module::to: cannot move the module's " + std::to_string(tensors.size()) + " tensors to " +
                        to_string(device) + ": mixgrad was built without CUDA");
    if (device.index() >= cuda::device_count())
      throw DeviceError("Module::to: cannot move the module's " + std::to_string(tensors.size()) + " tensors to " +
                        to_string(device) + ": " + std::to_string(cuda::device_count()) +
                        " CUDA device(s) available");
  }
  replace_in_place(tensors, [&](const Tensor& t) { return t.device() == device ? t : t.to(device); });
  return *this;
}

Module& Module::set_call_casts(const CallCasts& casts) {
  for (const std::optional<DType>& d : {casts.input, casts.output})
    if (d && !is_floating_point(*d))
      throw DTypeError("Module::set_call_casts: a call cast must be to a floating dtype, got " +
                       std::string(to_string(*d)));
  call_casts_ = casts;
  return *this;
}

namespace {

// `t` in `dtype` when both are floating and differ; else `t` itself.
Tensor cast_floating(const Tensor& t, const std::optional<DType>& dtype) {
  if (!dtype || !t.defined() || !is_floating_point(t.dtype()) || t.dtype() == *dtype) return t;
  return F::astype(t, *dtype);
}

}  // namespace

Tensor Module::call_with_casts(const Tensor& input) {
  return cast_floating(forward(cast_floating(input, call_casts_.input)), call_casts_.output);
}

Module& Module::to(DType dtype) { return to(dtype, ToOptions{}); }

Module& Module::to(MemoryFormat format) {
  check_not_recording("Module::to");
  const int rank = format == MemoryFormat::channels_last ? 4 : format == MemoryFormat::channels_last_3d ? 5 : -1;
  replace_in_place(unique_tensors(), [&](const Tensor& t) {
    return rank < 0 || t.ndim() == rank ? t.contiguous(format) : t;
  });
  return *this;
}

namespace {

// The tensors of every BatchNorm2d in the tree under `m` (m included).
void batch_norm_tensors(const Module& m, std::unordered_set<const TensorImpl*>& out) {
  if (dynamic_cast<const BatchNorm2d*>(&m) != nullptr) {
    for (const auto& [name, t] : m.named_parameters()) out.insert(t.impl());
    for (const auto& [name, t] : m.named_buffers()) out.insert(t.impl());
    return;
  }
  for (const auto& [name, child] : m.named_children()) batch_norm_tensors(*child, out);
}

}  // namespace

Module& Module::to(DType dtype, const ToOptions& options) {
  check_not_recording("Module::to");
  if (!is_floating_point(dtype))
    throw DTypeError("Module::to: parameters must stay floating, cannot cast them to " +
                     std::string(to_string(dtype)));
  std::unordered_set<const TensorImpl*> kept;
  if (options.keep_batch_norm_fp32) batch_norm_tensors(*this, kept);
  replace_in_place(unique_tensors(), [&](const Tensor& t) {
    if (!is_floating_point(t.dtype())) return t;
    const DType want = kept.contains(t.impl()) ? DType::float32 : dtype;
    return t.dtype() == want ? t : F::astype(t, want);
  });
  return *this;
}

void Module::check_state_dict(const StateDict& dict, const LoadStateDictOptions& options) const {
  checked_copies(dict, options);
}

void Module::load_state_dict(const StateDict& dict, const LoadStateDictOptions& options) {
  const auto copies = checked_copies(dict, options);
  for (const auto& [src, dst] : copies) ops::overwrite(dst, src);
}

namespace {

void print_tree(std::ostream& os, const Module& m, int indent) {
  os << m.describe();
  const auto& kids = m.named_children();
  if (kids.empty()) return;
  os << "(\n";
  for (const auto& [name, child] : kids) {
    os << std::string(indent + 2, ' ') << "(" << name << "): ";
    print_tree(os, *child, indent + 2);
    os << "\n";
  }
  os << std::string(indent, ' ') << ")";
}

}  // namespace

std::ostream& operator<<(std::ostream& os, const Module& module) {
  print_tree(os, module, 0);
  return os;
}

}  // namespace mixgrad::nn
