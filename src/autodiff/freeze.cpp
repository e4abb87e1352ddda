#include "mixgrad/autodiff/freeze.hpp"

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "autodiff/frozen.hpp"
#include "hooks/op_hooks.hpp"

namespace mixgrad::autodiff {

namespace {

// Frozen tensors by id (ids are never reused), held weakly; entries of dead
// tensors are dropped when the map has doubled since the last sweep, so a
// program that freezes many short-lived tensors does not grow it forever.
class FrozenRegistry {
 public:
  void set(const Tensor& t, bool frozen) {
    std::lock_guard lock(mutex_);
    if (!frozen) {
      map_.erase(t.id());
    } else if (map_.emplace(t.id(), t.impl_ptr()).second && map_.size() >= 2 * swept_size_) {
      std::erase_if(map_, [](const auto& kv) { return kv.second.expired(); });
      swept_size_ = std::max<size_t>(map_.size(), kMinSweep);
    }
    size_.store(map_.size(), std::memory_order_relaxed);
  }
  bool contains(uint64_t id) {
    if (size_.load(std::memory_order_relaxed) == 0) return false;  // the common case: nothing frozen
    std::lock_guard lock(mutex_);
    return map_.contains(id);
  }

 private:
  static constexpr size_t kMinSweep = 64;
  std::mutex mutex_;
  std::unordered_map<uint64_t, std::weak_ptr<TensorImpl>> map_;
  size_t swept_size_ = kMinSweep;
  std::atomic<size_t> size_{0};
};

FrozenRegistry& frozen() {
  static FrozenRegistry* r = new FrozenRegistry;  // outlives static modules and managers
  return *r;
}

// A recording has already decided which tensors it tracks: changing the set
// under it would leave a tracked tensor frozen, or a frozen one half tracked.
void check(const std::vector<Tensor>& tensors, const char* call) {
  if (!detail::recording_managers().empty())
    throw StateError(std::string(call) + ": called while a GradManager records; call it before record() or after " +
                     "backward()");
  for (size_t i = 0; i < tensors.size(); ++i)
    if (!tensors[i].defined()) throw StateError(std::string(call) + ": tensor " + std::to_string(i) + " is undefined");
}

void set_all(const std::vector<Tensor>& tensors, bool frozen_now, const char* call) {
  check(tensors, call);
  for (const Tensor& t : tensors) {
    frozen().set(t, frozen_now);
    if (frozen_now) t.set_grad({});  // a frozen tensor holds no gradient memory
  }
}

}  // namespace

bool detail::is_frozen_id(uint64_t id) { return frozen().contains(id); }

void freeze(const Tensor& tensor) { set_all({tensor}, true, "autodiff::freeze"); }
void freeze(const std::vector<Tensor>& tensors) { set_all(tensors, true, "autodiff::freeze"); }
void unfreeze(const Tensor& tensor) { set_all({tensor}, false, "autodiff::unfreeze"); }
void unfreeze(const std::vector<Tensor>& tensors) { set_all(tensors, false, "autodiff::unfreeze"); }
bool is_frozen(const Tensor& tensor) { return tensor.defined() && frozen().contains(tensor.id()); }

}  // namespace mixgrad::autodiff
