// A stream-ordered caching allocator for devices whose work runs on queues
// (CUDA streams), written against a small device memory API so that its rules
// are tested on the host with a fake device (tests/core/test_stream_allocator.cpp)
// and used on the GPU with the CUDA runtime (src/backend/cuda/memory.cpp).
//
// The rules are c10's CUDACachingAllocator's:
// - A block belongs to the stream it was allocated on. Freed, it is cached
//   under (device, stream, size class) and served again at once to the next
//   request of that size on that stream: the stream runs its work in order,
//   so the next user's kernels start after the last user's finished.
// - A block that was also used on other streams (`record_stream`) is not
//   reused when freed: an event is recorded on each of those streams, and the
//   block returns to its stream's cache only when all of them completed.
//   Completed events are collected at the next allocation (without waiting).
// - A request no cached block serves goes to the device (`malloc`). When the
//   device is out of memory, pending events are waited for, the device's
//   cached blocks are given back, and the request is retried once; if it
//   fails again that is OutOfMemoryError, naming the device and the sizes.
// - Size classes: multiples of 512 bytes up to 1 MiB, then powers of two and
//   1.5x powers of two (at most a third is slack). Blocks are not split.
//
//   FakeApi api;                              // or CudaMemoryApi
//   StreamAllocator alloc(api, DeviceType::cuda);
//   void* p = alloc.allocate(0, 4096, stream_a);
//   alloc.record_stream(p, stream_b);         // p is also read on stream_b
//   alloc.release(p);                         // reusable once stream_b passed this point
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "mixgrad/device.hpp"

namespace mixgrad::core {

/// A device queue, as the device memory API names it; 0 is the device's
/// default stream.
using StreamId = std::uintptr_t;
/// An event handle of the device memory API.
using EventHandle = void*;

/// What the allocator needs from a device. Only `malloc`, `free` and the
/// event calls reach the device; none is called on the cache-hit path.
class DeviceMemoryApi {
 public:
  virtual ~DeviceMemoryApi() = default;
  /// `bytes` of device memory, or nullptr when the device is out of memory;
  /// throws DeviceError for any other failure.
  virtual void* malloc(int device, std::size_t bytes) = 0;
  virtual void free(int device, void* p) noexcept = 0;
  virtual EventHandle create_event(int device) = 0;
  virtual void destroy_event(int device, EventHandle event) noexcept = 0;
  /// The event completes when the work queued on `stream` so far has.
  virtual void record_event(int device, EventHandle event, StreamId stream) = 0;
  /// True once the recorded event completed (does not wait).
  virtual bool query_event(int device, EventHandle event) = 0;
  /// Waits on the host until the recorded event completed.
  virtual void synchronize_event(int device, EventHandle event) = 0;
};

/// Byte counts of one device, as PyTorch's memory_stats names them.
struct StreamAllocatorStats {
  int64_t allocated = 0;       // in blocks handed out (block sizes, not requests)
  int64_t reserved = 0;        // obtained from the device: handed out, cached or waiting on events
  int64_t peak_allocated = 0;  // since construction or reset_peak
  int64_t device_mallocs = 0;  // calls to DeviceMemoryApi::malloc that succeeded
  int64_t oom_retries = 0;     // times the cache was emptied to retry a malloc
};

class StreamAllocator {
 public:
  /// `api` must outlive the allocator; `type` names the device in messages.
  StreamAllocator(DeviceMemoryApi& api, DeviceType type);
  /// Gives cached blocks and events back (waiting for pending events).
  /// Blocks still handed out are not freed: their owners free them.
  ~StreamAllocator();
  StreamAllocator(const StreamAllocator&) = delete;
  StreamAllocator& operator=(const StreamAllocator&) = delete;

  /// A block of at least `nbytes` on `device`, ordered on `stream`. Throws
  /// OutOfMemoryError as described above, ShapeError for a negative size.
  void* allocate(int device, int64_t nbytes, StreamId stream);
  /// Takes back a block from allocate(); unknown pointers are ignored.
  void release(void* p) noexcept;
  /// Marks the live block `p` as used on `stream` too, so that freeing it
  /// waits for the work queued there. ValueError when `p` is not a live
  /// block of this allocator.
  void record_stream(void* p, StreamId stream);
  /// Waits for pending events, then gives every cached block back.
  void empty_cache();

  StreamAllocatorStats stats(int device) const;
  void reset_peak(int device);

  /// The block size that serves a request of `nbytes` (the size class).
  /// Requests above 1.5 * 2^61 bytes are served exactly, so the doubling
  /// cannot overflow.
  static constexpr int64_t block_size(int64_t nbytes) {
    constexpr int64_t kSmall = 512, kLarge = int64_t{1} << 20, kTop = int64_t{1} << 61;
    if (nbytes <= kLarge) return nbytes <= kSmall ? kSmall : (nbytes + kSmall - 1) / kSmall * kSmall;
    int64_t p = kLarge;
    while (p < nbytes) {
      if (p + p / 2 >= nbytes) return p + p / 2;
      if (p >= kTop) return nbytes;
      p *= 2;
    }
    return p;
  }

 private:
  struct Block {
    void* ptr = nullptr;
    int64_t size = 0;
    int device = 0;
    StreamId stream = 0;
    std::vector<StreamId> other_streams;  // record_stream, besides `stream`
    int pending_events = 0;
  };
  struct FreeKey {
    StreamId stream;
    int64_t size;
    bool operator==(const FreeKey&) const = default;
  };
  struct FreeKeyHash {
    std::size_t operator()(const FreeKey& k) const noexcept {
      return std::hash<StreamId>()(k.stream) * 1000003u ^ std::hash<int64_t>()(k.size);
    }
  };
  struct DeviceState {
    std::unordered_map<FreeKey, std::vector<Block*>, FreeKeyHash> free;
    std::vector<EventHandle> spare_events;
    StreamAllocatorStats stats;
  };
  struct PendingEvent {
    EventHandle event;
    Block* block;
  };

  DeviceState& state(int device);
  void cache(Block* b);
  void process_events(bool wait, int device);  // device < 0: all devices
  void release_cached(int device);              // device < 0: all devices
  EventHandle take_event(int device);

  DeviceMemoryApi& api_;
  DeviceType type_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<DeviceState>> devices_;
  std::unordered_map<void*, Block*> live_;  // handed out, or freed and waiting on events
  std::deque<PendingEvent> pending_;
};

}  // namespace mixgrad::core
