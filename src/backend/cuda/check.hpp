// CUDA runtime helpers shared by the CUDA backend's files: the status check
// and the device guard. Kernels launch on the current stream of their device
// (backend/cuda/stream.hpp).
//
//   MIXGRAD_CUDA_CHECK(cudaMalloc(&p, bytes));   // throws DeviceError naming the call, file and line
//   DeviceGuard guard(t.device().index());       // current device for this scope
//   kernel<<<blocks, threads, 0, current_stream(t.device().index())>>>(...);
//   MIXGRAD_CUDA_CHECK(cudaGetLastError());      // after every launch
#pragma once

#include <cuda_runtime_api.h>

namespace mixgrad::backend::cuda {

/// Throws DeviceError "CUDA error <name> (<description>) in <call> at <file>:<line>"
/// and clears the runtime's last (non-sticky) error.
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);

/// Number of usable CUDA devices; 0 when there is no driver or no device.
int device_count();

/// Throws DeviceError naming `op` unless `device` is an existing CUDA device.
void check_device(int device, const char* op);

/// `device`'s compute capability as major * 10 + minor (90 for Hopper),
/// asked once per device; 0 for a device that does not exist.
int compute_capability(int device);

/// Makes `device` current for the scope and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

/// The calling thread's current stream on the current device (the one a
/// DeviceGuard selected); backend/cuda/stream.hpp's current_stream(device)
/// is the same without asking the runtime for the device.
cudaStream_t stream();

/// Registers the CUDA caching allocator (memory.cpp) for DeviceType::cuda;
/// runtime.cpp calls it once at load time.
void register_cuda_allocator();

}  // namespace mixgrad::backend::cuda

/// Evaluates a CUDA runtime call once; throws DeviceError unless it returned cudaSuccess.
#define MIXGRAD_CUDA_CHECK(call)                                                           \
  do {                                                                                     \
    const cudaError_t mixgrad_cuda_status_ = (call);                                       \
    if (mixgrad_cuda_status_ != cudaSuccess)                                               \
      ::mixgrad::backend::cuda::throw_cuda_error(mixgrad_cuda_status_, #call, __FILE__, __LINE__); \
  } while (0)
