// mixgrad/storage.hpp — a block of device memory shared by a tensor and its
// views. Users rarely touch it; `Tensor` owns one through a shared pointer.
//
// CPU blocks are 64-byte aligned and come from a caching allocator, so a
// training loop that allocates the same sizes every step does not go back to
// the operating system (and does not page-fault fresh memory) each time.
#pragma once

#include <cstdint>
#include <memory>

#include "mixgrad/device.hpp"

namespace mixgrad {

class Storage {
 public:
  /// Allocates `nbytes` (uninitialised) on `device`; throws OutOfMemoryError
  /// when the host or device has not enough free (after the cached blocks
  /// have been given back and the allocation retried once).
  Storage(int64_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  int64_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  int64_t nbytes_ = 0;
  Device device_;
};

/// Returns cached but unused CPU blocks to the system.
void empty_cache();

/// Bytes currently handed out to tensors, and the peak since the last reset
/// (CPU). For tests and benchmarks of memory use.
int64_t allocated_bytes();
int64_t peak_allocated_bytes();
void reset_peak_allocated_bytes();

}  // namespace mixgrad
