// The CUDA allocator behind Storage: the stream-ordered caching allocator of
// core (core/stream_allocator.hpp) over the CUDA runtime. cudaMalloc and
// cudaFree synchronise the device and cost tens of microseconds, so freed
// blocks are cached per (device, stream, size class); a training loop that
// allocates the same sizes every step stops calling cudaMalloc after its
// first step. A block is ordered on the current stream at its allocation
// (backend/cuda/stream.hpp); record_stream() covers use on other streams.
//
// While a thread captures a CUDA graph (backend/step_capture.hpp), its
// allocations come from the capture's private pool (backend/capture_pool.hpp),
// cudaMalloc runs in the relaxed capture mode (it is legal inside a capture,
// but the thread-local mode would refuse it), and a cudaFree, which would
// synchronise and so break the capture, waits until the thread stops
// capturing.
//
// Registered for DeviceType::cuda by register_cuda_allocator(), which
// runtime.cpp calls from a static initialiser: runtime.cpp is always linked
// (the dispatcher calls into it), so the registration happens even when the
// library is linked statically and nothing names this file's symbols.
#include <cuda_runtime_api.h>

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backend/capture_pool.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/memory.hpp"
#include "backend/host_sync.hpp"
#include "backend/cuda/stream.hpp"
#include "core/stream_allocator.hpp"
#include "mixgrad/allocator.hpp"
#include "mixgrad/cuda.hpp"
#include "mixgrad/error.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::backend::cuda {

namespace {

class CudaMemoryApi final : public core::DeviceMemoryApi {
 public:
  void* malloc(int device, size_t bytes) override {
    DeviceGuard guard(device);
    void* p = nullptr;
    const cudaError_t status = capturing() ? relaxed_malloc(&p, bytes) : cudaMalloc(&p, bytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky: clear it so the next call does not see it
      return nullptr;
    }
    if (status != cudaSuccess)
      throw_cuda_error(status, ("cudaMalloc(" + std::to_string(bytes) + " bytes)").c_str(), __FILE__, __LINE__);
    return p;
  }
  void free(int device, void* p) noexcept override {
    std::vector<std::pair<int, void*>> later;
    {
      std::lock_guard lock(deferred_mutex_);
      if (capturing()) {  // cudaFree would synchronise inside the capture: later
        try {
          deferred_.emplace_back(device, p);
        } catch (...) {  // no memory for the list: the block stays allocated
        }
        return;
      }
      later.swap(deferred_);
    }
    for (auto [d, q] : later) free(d, q);
    int previous = 0;
    if (cudaGetDevice(&previous) != cudaSuccess) return;
    cudaSetDevice(device);
    note_host_sync("cudaFree");  // cudaFree waits for the device
    cudaFree(p);
    cudaSetDevice(previous);
  }
  core::EventHandle create_event(int device) override {
    DeviceGuard guard(device);
    cudaEvent_t e = nullptr;
    MIXGRAD_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  void destroy_event(int, core::EventHandle e) noexcept override { cudaEventDestroy(static_cast<cudaEvent_t>(e)); }
  void record_event(int device, core::EventHandle e, core::StreamId stream) override {
    DeviceGuard guard(device);
    MIXGRAD_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(e), reinterpret_cast<cudaStream_t>(stream)));
  }
  bool query_event(int, core::EventHandle e) override {
    const cudaError_t s = cudaEventQuery(static_cast<cudaEvent_t>(e));
    if (s == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    MIXGRAD_CUDA_CHECK(s);
    return true;
  }
  void synchronize_event(int, core::EventHandle e) override {
    note_host_sync("the caching allocator's event wait");
    MIXGRAD_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(e)));
  }

 private:
  static cudaError_t relaxed_malloc(void** p, size_t bytes) {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    const cudaError_t status = cudaMalloc(p, bytes);
    cudaThreadExchangeStreamCaptureMode(&mode);
    return status;
  }
  // Frees asked for while a thread captured: done at the next free outside one.
  std::mutex deferred_mutex_;
  std::vector<std::pair<int, void*>> deferred_;
};

class CudaAllocator final : public Allocator {
 public:
  void* allocate(int64_t nbytes, Device device) override {
    check_device(device.index(), "Storage");
    return pools_.allocate(device.index(), nbytes, reinterpret_cast<core::StreamId>(current_stream(device.index())));
  }
  void release(void* p, int64_t, Device) noexcept override { pools_.release(p); }
  void empty_cache() override { blocks_.empty_cache(); }
  core::StreamAllocator& blocks() { return blocks_; }
  CapturePools& pools() { return pools_; }

 private:
  CudaMemoryApi api_;
  core::StreamAllocator blocks_{api_, DeviceType::cuda};
  CapturePools pools_{api_, blocks_};
};

CudaAllocator& allocator() {
  // Never destroyed: tensors in static storage may be freed after the CUDA
  // runtime has shut down, and then must not call into it.
  static auto* a = new CudaAllocator;
  return *a;
}

}  // namespace

void register_cuda_allocator() { register_allocator(DeviceType::cuda, &allocator()); }

CapturePools& capture_pools() { return allocator().pools(); }

void record_stream(const Tensor& t, cudaStream_t stream) {
  if (!t.defined() || !t.device().is_cuda())
    throw DeviceError("record_stream: needs a CUDA tensor, got " +
                      (t.defined() ? to_string(t.device()) : std::string("an undefined tensor")));
  if (t.impl()->storage->is_external()) return;  // not the allocator's memory: its owner orders it
  allocator().pools().record_stream(t.impl()->storage->data(), reinterpret_cast<core::StreamId>(stream));
}

}  // namespace mixgrad::backend::cuda

namespace mixgrad::cuda {

MemoryStats memory_stats(int device) {
  backend::cuda::check_device(device, "cuda::memory_stats");
  const core::StreamAllocatorStats s = backend::cuda::allocator().blocks().stats(device);
  return {s.allocated, s.reserved, s.peak_allocated};
}

void reset_peak_memory_stats(int device) {
  backend::cuda::check_device(device, "cuda::reset_peak_memory_stats");
  backend::cuda::allocator().blocks().reset_peak(device);
}

}  // namespace mixgrad::cuda
