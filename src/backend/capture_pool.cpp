// Capture-private memory pools (backend/capture_pool.hpp).
#include "backend/capture_pool.hpp"

#include <string>

#include "mixgrad/error.hpp"

namespace mixgrad::backend {

namespace {

// The pool the calling thread's allocations go to, and whose pools object
// owns it (tests run several).
struct Routing {
  const void* pools = nullptr;
  void* pool = nullptr;
};
thread_local Routing t_routing;

}  // namespace

CapturePools::CapturePools(core::DeviceMemoryApi& api, core::StreamAllocator& shared) : api_(api), shared_(shared) {}

CapturePools::~CapturePools() {
  // Blocks still live keep their memory (their owners would free it here);
  // held shared blocks go back to the shared cache.
  for (auto& [id, p] : pools_)
    for (void* h : p->held) shared_.release(h);
}

CapturePools::Pool* CapturePools::routed_pool() const {
  return t_routing.pools == this ? static_cast<Pool*>(t_routing.pool) : nullptr;
}

CapturePools::Pool& CapturePools::pool(PoolId id, const char* op) const {
  auto it = pools_.find(id);
  if (it == pools_.end() || it->second->retired)
    throw StateError(std::string(op).append(": capture pool ").append(std::to_string(id)).append(" does not exist or was destroyed"));
  return *it->second;
}

CapturePools::PoolId CapturePools::create_pool() {
  std::lock_guard lock(mutex_);
  const PoolId id = next_id_++;
  auto p = std::make_unique<Pool>();
  p->id = id;
  p->blocks = std::make_unique<core::StreamAllocator>(api_, DeviceType::cuda);
  pools_.emplace(id, std::move(p));
  alive_.fetch_add(1, std::memory_order_relaxed);
  return id;
}

void CapturePools::begin(PoolId id) {
  std::lock_guard lock(mutex_);
  if (t_routing.pool != nullptr)
    throw StateError("CapturePools::begin: this thread already allocates from a capture pool");
  Pool& p = pool(id, "CapturePools::begin");
  ++p.routed;
  t_routing = {this, &p};
}

void CapturePools::end() noexcept {
  std::lock_guard lock(mutex_);
  if (Pool* p = routed_pool()) --p->routed;
  t_routing = {};
}

void CapturePools::destroy_pool(PoolId id) {
  std::lock_guard lock(mutex_);
  Pool& p = pool(id, "CapturePools::destroy_pool");
  if (p.routed > 0)
    throw StateError(std::string("CapturePools::destroy_pool: pool ").append(std::to_string(id))
                         .append(" is still capturing on a thread"));
  p.retired = true;
  for (void* h : p.held) shared_.release(h);
  p.held.clear();
  p.blocks->empty_cache();
  forget(&p);
}

void CapturePools::forget(Pool* p) {
  if (!p->retired || p->live > 0) return;
  alive_.fetch_sub(1, std::memory_order_relaxed);
  pools_.erase(p->id);  // the pool's allocator frees what it still caches
}

void* CapturePools::allocate(int device, int64_t nbytes, core::StreamId stream) {
  if (alive_.load(std::memory_order_relaxed) == 0) return shared_.allocate(device, nbytes, stream);
  Pool* p = routed_pool();
  if (p == nullptr) return shared_.allocate(device, nbytes, stream);
  void* b = p->blocks->allocate(device, nbytes, stream);
  std::lock_guard lock(mutex_);
  owner_[b] = p;
  ++p->live;
  return b;
}

void CapturePools::release(void* b) noexcept {
  if (alive_.load(std::memory_order_relaxed) == 0) return shared_.release(b);
  std::lock_guard lock(mutex_);
  auto it = owner_.find(b);
  if (it != owner_.end()) {
    Pool* p = it->second;
    owner_.erase(it);
    p->blocks->release(b);  // cached for this pool alone
    --p->live;
    if (p->retired) {
      try {
        p->blocks->empty_cache();
      } catch (...) {  // a failing device: the memory stays cached until the pool goes
      }
      forget(p);
    }
    return;
  }
  if (Pool* p = routed_pool()) {
    try {
      p->held.push_back(b);  // a replay may still read it
      return;
    } catch (...) {  // no memory for the list: never reuse the block rather than risk it
      return;
    }
  }
  shared_.release(b);
}

void CapturePools::record_stream(void* b, core::StreamId stream) {
  Pool* p = nullptr;
  {
    std::lock_guard lock(mutex_);
    auto it = owner_.find(b);
    if (it != owner_.end()) p = it->second;
  }
  if (p != nullptr) p->blocks->record_stream(b, stream);
  else shared_.record_stream(b, stream);
}

bool CapturePools::in_pool(void* b) const {
  std::lock_guard lock(mutex_);
  return owner_.count(b) > 0;
}

CapturePools::PoolStats CapturePools::stats(PoolId id, int device) const {
  std::lock_guard lock(mutex_);
  auto it = pools_.find(id);
  if (it == pools_.end()) throw ValueError(std::string("CapturePools::stats: no pool ").append(std::to_string(id)));
  const Pool& p = *it->second;
  const core::StreamAllocatorStats s = p.blocks->stats(device);
  return {.live_blocks = p.live, .held_shared = static_cast<int64_t>(p.held.size()),
          .cached_bytes = s.reserved - s.allocated, .retired = p.retired};
}

}  // namespace mixgrad::backend
