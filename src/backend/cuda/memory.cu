// CUDA caching allocator behind Storage (src/core/storage.cpp). cudaMalloc
// and cudaFree synchronise the device and cost tens of microseconds, so
// freed blocks are kept per device in per-size-class free lists and handed
// out again; a training loop that allocates the same sizes every step stops
// calling cudaMalloc after its first step. When cudaMalloc runs out of
// memory, the device's cached blocks are freed and the call is retried once;
// if it fails again, that is an OutOfMemoryError (any other failure a
// DeviceError).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cuda/check.hpp"
#include "backend/cuda/plan.hpp"
#include "mixgrad/error.hpp"

namespace mixgrad {

namespace cuda_memory {

namespace {

class DeviceCache {
 public:
  void* take(size_t bytes, int device) {
    std::lock_guard lock(mutex_);
    auto it = free_.find(bytes);
    void* p = nullptr;
    if (it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
    } else {
      backend::cuda::DeviceGuard guard(device);
      cudaError_t status = cudaMalloc(&p, bytes);
      if (status == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        release_cached_locked();
        status = cudaMalloc(&p, bytes);
      }
      if (status == cudaErrorMemoryAllocation) {
        cudaGetLastError();  // not sticky: clear it so the next call does not see it
        throw OutOfMemoryError("Storage: cannot allocate " + std::to_string(bytes) + " bytes on cuda:" +
                               std::to_string(device) + ": out of device memory");
      }
      if (status != cudaSuccess) {
        backend::cuda::throw_cuda_error(status, ("cudaMalloc(" + std::to_string(bytes) + " bytes)").c_str(),
                                        __FILE__, __LINE__);
      }
    }
    live_[p] = bytes;
    return p;
  }

  void give(void* p) {
    std::lock_guard lock(mutex_);
    auto it = live_.find(p);
    if (it == live_.end()) return;  // not ours: nothing sensible to do in a destructor
    free_[it->second].push_back(p);
    live_.erase(it);
  }

 private:
  void release_cached_locked() {
    for (auto& [bytes, list] : free_)
      for (void* p : list) cudaFree(p);
    free_.clear();
  }

  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  std::unordered_map<void*, size_t> live_;
};

DeviceCache& cache_of(int device) {
  // Never destroyed: tensors in static storage may be freed after the CUDA
  // runtime has shut down, and then must not call into it.
  static std::mutex mutex;
  static auto* caches = new std::unordered_map<int, DeviceCache*>;
  std::lock_guard lock(mutex);
  DeviceCache*& c = (*caches)[device];
  if (!c) c = new DeviceCache;
  return *c;
}

}  // namespace

void* allocate(int64_t nbytes, int device) {
  backend::cuda::check_device(device, "allocate");
  return cache_of(device).take(backend::cuda_plan::block_size(static_cast<size_t>(nbytes)), device);
}

void release(void* p, int device) { cache_of(device).give(p); }

}  // namespace cuda_memory
}  // namespace mixgrad
