// mixgrad/allocator.hpp — where Storage gets its memory: one allocator per
// device type, registered at start-up by the code that owns the device.
//
// The CPU's caching allocator is registered from the start; the CUDA backend
// registers its stream-ordered caching allocator when it is built. Core code
// never calls a backend's allocator by name, so a new device type is a new
// registration, not an edit of `Storage`.
//
//   class CountingAllocator : public mg::Allocator { ... };
//   CountingAllocator counting;
//   mg::Allocator* before = mg::register_allocator(mg::DeviceType::cpu, &counting);
//   auto t = mg::zeros({4});                          // served by `counting`
//   mg::register_allocator(mg::DeviceType::cpu, before);
//
// A storage remembers the allocator that served it and returns its memory
// there, so swapping allocators while tensors live is safe.
#pragma once

#include <cstdint>

#include "mixgrad/device.hpp"

namespace mixgrad {

/// Serves the memory of one device type. Implementations must be thread
/// safe: tensors are created and freed from any thread.
class Allocator {
 public:
  /// At least `nbytes` (0 allowed) of uninitialised memory on `device`,
  /// aligned to 64 bytes or more. Throws OutOfMemoryError when the device
  /// has not enough free memory (after giving back what it caches), and
  /// DeviceError for a device it cannot serve. A device allocator orders the
  /// block on the device's current stream.
  virtual void* allocate(int64_t nbytes, Device device) = 0;

  /// Takes back a block `allocate(nbytes, device)` returned. Must not throw:
  /// it runs in destructors.
  virtual void release(void* data, int64_t nbytes, Device device) noexcept = 0;

  /// Gives cached, unused blocks back to the device (or the system).
  virtual void empty_cache() {}

 protected:
  // Registered allocators are never deleted through this interface, and a
  // non-virtual destructor lets one be a constant-initialised object with no
  // exit-time destructor, still usable by tensors freed during exit.
  ~Allocator() = default;
};

/// Makes `allocator` serve every new storage on devices of `type` and returns
/// the allocator it replaces (nullptr when none was registered). Passing
/// nullptr unregisters: allocations on that device type then throw
/// DeviceError. The allocator must outlive every storage it served.
Allocator* register_allocator(DeviceType type, Allocator* allocator) noexcept;

/// The allocator registered for `type`, or nullptr.
Allocator* registered_allocator(DeviceType type) noexcept;

}  // namespace mixgrad
