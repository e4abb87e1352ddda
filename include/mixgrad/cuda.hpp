// mixgrad/cuda.hpp — the CUDA runtime as mixgrad sees it: devices,
// synchronisation and the caching allocator's memory counts. Every build
// has these functions; without the CUDA backend, a driver or a GPU there is
// no device, and what needs one throws DeviceError.
//
//   if (mg::cuda::is_available()) {
//     auto x = mg::ones({1024}, mg::DType::float32, mg::Device::cuda(0));
//     mg::cuda::synchronize(0);                       // wait for the work queued so far
//     auto m = mg::cuda::memory_stats(0);             // m.allocated, m.reserved, m.peak_allocated
//   }
//
// Kernels and copies run on the calling thread's current stream of the
// device (current_stream): the legacy default stream unless the backend's
// StreamGuard set another (src/backend/cuda/stream.hpp; see
// docs/backend.md, "Execution context").
#pragma once

#include <cstdint>

namespace mixgrad::cuda {

/// True when mixgrad was built with its CUDA backend and sees a device.
bool is_available();

/// True when mixgrad was built with its CUDA backend (a device or not).
bool is_built();

/// Usable CUDA devices: 0 without the CUDA backend, a driver or a device.
int device_count();

/// Waits until all work queued on every device has finished; DeviceError
/// when there is no CUDA device.
void synchronize();

/// Waits until all work queued on `device` has finished; DeviceError unless
/// `device` is an existing CUDA device.
void synchronize(int device);

/// The stream mixgrad's kernels and copies on `device` run on in the
/// calling thread, as a `cudaStream_t` (nullptr: the legacy default
/// stream), for code that works beside mixgrad on the same data (NCCL
/// collectives, one's own kernels): enqueue there and the order with
/// mixgrad's work holds without a synchronisation. DeviceError unless
/// `device` is an existing CUDA device.
void* current_stream(int device);

/// Whether F::scaled_dot_product_attention on `device` can run cuDNN's
/// fused kernel: the build has the cuDNN frontend and the GPU is an Ampere
/// (compute capability 8.0) or later. Which calls take it then depends on
/// their dtypes, head dims and mask (docs/cuda.md, "What runs on CUDA");
/// the others run the composed ops. False without such a device.
bool fused_attention_available(int device);

/// Forward and backward attention calls that cuDNN's fused kernel has run
/// in this process, on every device: a way to see that a model takes it.
int64_t fused_attention_calls();

/// Whether `device` runs FP8 GEMMs (compute capability 8.9 or later: Ada,
/// Hopper): there, amp::fp8_autocast's linear products whose extents are
/// multiples of 16 run cuBLASLt's FP8 GEMMs; elsewhere FP8 is emulated in
/// float32 (docs/fp8.md). False without such a device.
bool fp8_gemm_available(int device);

/// Memory of `device` as the caching allocator counts it (bytes).
struct MemoryStats {
  int64_t allocated = 0;       // in blocks held by tensors
  int64_t reserved = 0;        // taken from the device: held, cached, or waiting for a stream
  int64_t peak_allocated = 0;  // since the start or reset_peak_memory_stats
};

/// DeviceError unless `device` is an existing CUDA device.
MemoryStats memory_stats(int device);
void reset_peak_memory_stats(int device);

}  // namespace mixgrad::cuda
