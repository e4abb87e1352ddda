#include "amp/grad_list.hpp"

#include <unordered_map>
#include <unordered_set>

#include "core/checks.hpp"

namespace mixgrad::amp::detail {

namespace {

// Two gradients are the same memory when they start at the same address
// with the same layout; a kernel must visit it once, or it scales twice.
bool same_layout(const Tensor& a, const Tensor& b) {
  return a.raw_data() == b.raw_data() && a.shape() == b.shape() && a.strides() == b.strides() &&
         a.dtype() == b.dtype();
}

}  // namespace

GradList collect_grads(std::string_view op, const std::vector<Tensor>& tensors) {
  GradList list;
  std::unordered_set<uint64_t> seen;
  std::unordered_map<const void*, size_t> by_address;  // first grad starting at an address
  for (const Tensor& t : tensors) {
    if (!t.defined() || !seen.insert(t.id()).second) continue;
    Tensor g = t.grad();
    if (!g.defined()) continue;
    if (!is_floating_point(g.dtype()))
      throw DTypeError(std::string(op) + ": the gradient of a " + core::describe(t) + " tensor is " +
                       core::describe(g) + "; gradients must be floating");
    if (!list.grads.empty() && g.device() != list.grads.front().device())
      throw DeviceError(std::string(op) + ": gradients on " + to_string(list.grads.front().device()) + " and " +
                        to_string(g.device()) + "; all must be on one device");
    for (int d = 0; d < g.ndim(); ++d)
      if (g.shape()[d] > 1 && g.strides()[d] == 0)
        throw ShapeError(std::string(op) + ": the gradient " + core::describe(g) +
                         " is a broadcast view (stride 0 in dim " + std::to_string(d) +
                         "); it cannot be modified in place");
    list.owners.push_back(t);
    auto [at, fresh] = by_address.try_emplace(g.raw_data(), list.grads.size());
    if (fresh || !same_layout(list.grads[at->second], g)) list.grads.push_back(std::move(g));
  }
  return list;
}

}  // namespace mixgrad::amp::detail
