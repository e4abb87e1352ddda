// A process-wide table keyed by the gradient's TensorImpl. Each entry keeps a
// weak handle, so a dead gradient (or a new one at a recycled address) is
// never taken for a marked one; dead entries are swept when the table has
// doubled since the last sweep, so it stays proportional to the live marks.
#include "amp/scaled_grads.hpp"

#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace mixgrad::amp::detail {

namespace {

struct Entry {
  std::weak_ptr<TensorImpl> grad;
  GradMark mark;
};

struct Table {
  std::mutex mutex;
  std::unordered_map<const TensorImpl*, Entry> entries;
  size_t sweep_at = 64;
};

Table& table() {
  static Table t;
  return t;
}

void set(const Tensor& grad, GradMark mark) {
  if (!grad.defined()) return;
  Table& t = table();
  std::lock_guard lock(t.mutex);
  t.entries.insert_or_assign(grad.impl(), Entry{grad.impl_ptr(), std::move(mark)});
  if (t.entries.size() >= t.sweep_at) {
    std::erase_if(t.entries, [](const auto& kv) { return kv.second.grad.expired(); });
    t.sweep_at = std::max<size_t>(64, 2 * t.entries.size());
  }
}

}  // namespace

void mark_scaled(const Tensor& grad, const void* scaler) {
  set(grad, GradMark{.scaled = true, .scaler = scaler, .found_inf = Tensor()});
}

void mark_unscaled(const Tensor& grad, const Tensor& found_inf) {
  set(grad, GradMark{.scaled = false, .scaler = nullptr, .found_inf = found_inf});
}

GradMark grad_mark(const Tensor& grad) {
  if (!grad.defined()) return {};
  Table& t = table();
  std::lock_guard lock(t.mutex);
  const auto it = t.entries.find(grad.impl());
  if (it == t.entries.end()) return {};
  if (it->second.grad.lock().get() != grad.impl()) {  // a dead gradient's entry
    t.entries.erase(it);
    return {};
  }
  return it->second.mark;
}

}  // namespace mixgrad::amp::detail
