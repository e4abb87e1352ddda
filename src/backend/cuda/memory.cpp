// The CUDA allocator behind Storage: the stream-ordered caching allocator of
// core (core/stream_allocator.hpp) over the CUDA runtime. cudaMalloc and
// cudaFree synchronise the device and cost tens of microseconds, so freed
// blocks are cached per (device, stream, size class); a training loop that
// allocates the same sizes every step stops calling cudaMalloc after its
// first step. A block is ordered on the current stream at its allocation
// (backend/cuda/stream.hpp); record_stream() covers use on other streams.
//
// Registered for DeviceType::cuda by register_cuda_allocator(), which
// runtime.cpp calls from a static initialiser: runtime.cpp is always linked
// (the dispatcher calls into it), so the registration happens even when the
// library is linked statically and nothing names this file's symbols.
#include <cuda_runtime_api.h>

#include <string>

#include "backend/cuda/check.hpp"
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
    const cudaError_t status = cudaMalloc(&p, bytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky: clear it so the next call does not see it
      return nullptr;
    }
    if (status != cudaSuccess)
      throw_cuda_error(status, ("cudaMalloc(" + std::to_string(bytes) + " bytes)").c_str(), __FILE__, __LINE__);
    return p;
  }
  void free(int device, void* p) noexcept override {
    int previous = 0;
    if (cudaGetDevice(&previous) != cudaSuccess) return;
    cudaSetDevice(device);
    note_host_sync();  // cudaFree waits for the device
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
    note_host_sync();
    MIXGRAD_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(e)));
  }
};

class CudaAllocator final : public Allocator {
 public:
  void* allocate(int64_t nbytes, Device device) override {
    check_device(device.index(), "Storage");
    return blocks_.allocate(device.index(), nbytes, reinterpret_cast<core::StreamId>(current_stream(device.index())));
  }
  void release(void* p, int64_t, Device) noexcept override { blocks_.release(p); }
  void empty_cache() override { blocks_.empty_cache(); }
  core::StreamAllocator& blocks() { return blocks_; }

 private:
  CudaMemoryApi api_;
  core::StreamAllocator blocks_{api_, DeviceType::cuda};
};

CudaAllocator& allocator() {
  // Never destroyed: tensors in static storage may be freed after the CUDA
  // runtime has shut down, and then must not call into it.
  static auto* a = new CudaAllocator;
  return *a;
}

}  // namespace

void register_cuda_allocator() { register_allocator(DeviceType::cuda, &allocator()); }

void record_stream(const Tensor& t, cudaStream_t stream) {
  if (!t.defined() || !t.device().is_cuda())
    throw DeviceError("record_stream: needs a CUDA tensor, got " +
                      (t.defined() ? to_string(t.device()) : std::string("an undefined tensor")));
  if (t.impl()->storage->is_external()) return;  // not the allocator's memory: its owner orders it
  allocator().blocks().record_stream(t.impl()->storage->data(), reinterpret_cast<core::StreamId>(stream));
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
