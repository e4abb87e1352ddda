// mixgrad/storage.hpp — a block of device memory shared by a tensor and its
// views. Users rarely touch it; `Tensor` owns one through a shared pointer.
//
// Memory comes from the allocator registered for the device type
// (mixgrad/allocator.hpp). CPU blocks are 64-byte aligned and come from a
// caching allocator, so a training loop that allocates the same sizes every
// step does not go back to the operating system (and does not page-fault
// fresh memory) each time. A storage can also wrap memory someone else owns
// (zero-copy interop), with a deleter that runs when the last tensor is gone:
//
//   auto s = std::make_shared<mg::Storage>(ptr, nbytes, mg::Device::cpu(),
//                                          [](void* p) { std::free(p); });
//   mg::Tensor t = mg::from_blob(ptr, {2, 3}, mg::DType::float32);  // no deleter: ptr must outlive t
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "mixgrad/device.hpp"

namespace mixgrad {

class Allocator;

class Storage {
 public:
  /// Allocates `nbytes` (uninitialised) on `device` from the allocator
  /// registered for its type; throws OutOfMemoryError when the host or
  /// device has not enough free (after the cached blocks have been given
  /// back and the allocation retried once), DeviceError when no allocator
  /// serves the device type, ShapeError for a negative size.
  Storage(int64_t nbytes, Device device);

  /// Wraps `nbytes` at `data` on `device`, memory mixgrad did not allocate.
  /// `deleter(data)` runs when the storage dies; an empty deleter means the
  /// caller keeps the memory alive for as long as any tensor uses it.
  /// ShapeError for a negative size, ValueError for a null `data` with a
  /// non-zero size.
  Storage(void* data, int64_t nbytes, Device device, std::function<void(void*)> deleter);

  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  int64_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  /// True when the memory came from outside (the wrapping constructor).
  bool is_external() const { return allocator_ == nullptr; }

 private:
  void* data_ = nullptr;
  int64_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;           // who takes the memory back; null when external
  std::function<void(void*)> deleter_;       // external memory only
};

/// Returns cached but unused blocks of every registered allocator to the
/// system (CPU) or the device.
void empty_cache();

/// Bytes currently handed out to tensors, and the peak since the last reset
/// (CPU). For tests and benchmarks of memory use.
int64_t allocated_bytes();
int64_t peak_allocated_bytes();
void reset_peak_allocated_bytes();

}  // namespace mixgrad
