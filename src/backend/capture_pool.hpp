// Capture-private memory pools over a stream-ordered caching allocator
// (core/stream_allocator.hpp). A CUDA graph holds the addresses its kernels
// used at capture; replays write there again. So, while a thread captures:
// - its allocations come from the capture's private pool (a caching
//   allocator of its own), and a pool block, freed during the capture or
//   after it, returns to that pool alone: no allocation outside the capture
//   can be handed memory a replay will write;
// - a block of the shared cache freed during the capture (an input of the
//   captured work, say) is held, not cached, because replays still read it;
// - destroying the pool (when its graph is destroyed) gives the held blocks
//   back to the shared cache and the pool's cached memory to the device; a
//   pool block still held by a tensor goes to the device when it is freed.
//
//   CapturePools pools(api, shared);          // shared: the device's StreamAllocator
//   const auto id = pools.create_pool();
//   pools.begin(id);                           // this thread's allocations now come from the pool
//   void* p = pools.allocate(0, 4096, capture_stream);
//   pools.end();
//   pools.destroy_pool(id);
//
// Without a pool (no CapturedStep alive) allocate and release cost one
// relaxed atomic load more than the shared allocator's. Tested on the host
// with a fake device (tests/cuda/test_capture_rules.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/stream_allocator.hpp"

namespace mixgrad::backend {

class CapturePools {
 public:
  using PoolId = uint64_t;

  /// What one pool holds now (for tests and error messages).
  struct PoolStats {
    int64_t live_blocks = 0;     // pool blocks handed out
    int64_t held_shared = 0;     // shared blocks freed during the capture, held until the pool dies
    int64_t cached_bytes = 0;    // pool blocks freed, cached for this pool alone
    bool retired = false;        // destroy_pool was called; gone once no block is live
  };

  /// `api` and `shared` must outlive this object.
  CapturePools(core::DeviceMemoryApi& api, core::StreamAllocator& shared);
  ~CapturePools();
  CapturePools(const CapturePools&) = delete;
  CapturePools& operator=(const CapturePools&) = delete;

  /// A new, empty private pool.
  PoolId create_pool();
  /// Routes the calling thread's allocations to pool `id` until end();
  /// StateError when the thread already routes to a pool or `id` is not a
  /// live pool.
  void begin(PoolId id);
  /// Ends the calling thread's routing; does nothing without one.
  void end() noexcept;
  /// Retires pool `id` (StateError if it is routed to by a thread, nothing
  /// changed): held shared blocks return to the shared cache, the pool's
  /// cached memory to the device; blocks still live go to the device when freed.
  void destroy_pool(PoolId id);

  void* allocate(int device, int64_t nbytes, core::StreamId stream);
  void release(void* p) noexcept;
  void record_stream(void* p, core::StreamId stream);
  /// True when `p` is a live block of a private pool.
  bool in_pool(void* p) const;
  /// Pool `id` on `device`; ValueError for an unknown or fully released pool.
  PoolStats stats(PoolId id, int device) const;
  /// Pools created and not yet gone.
  int64_t pools_alive() const { return alive_.load(std::memory_order_relaxed); }

 private:
  struct Pool {
    PoolId id = 0;
    std::unique_ptr<core::StreamAllocator> blocks;
    std::vector<void*> held;  // shared blocks freed during the capture
    int64_t live = 0;
    int routed = 0;           // threads routing to it (0 or 1)
    bool retired = false;
  };
  Pool* routed_pool() const;
  Pool& pool(PoolId id, const char* op) const;
  void forget(Pool* p);  // under mutex_: deletes a retired pool with no live block

  core::DeviceMemoryApi& api_;
  core::StreamAllocator& shared_;
  mutable std::mutex mutex_;
  std::unordered_map<PoolId, std::unique_ptr<Pool>> pools_;
  std::unordered_map<void*, Pool*> owner_;  // live pool blocks
  std::atomic<int64_t> alive_{0};
  PoolId next_id_ = 1;
};

}  // namespace mixgrad::backend
