// What every cuBLASLt call shares (defined in cuda/matmul.cpp): one handle
// per device and, per (device, stream), a workspace from the caching
// allocator. Used by the matrix products and the FP8 GEMM.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>

namespace mixgrad::backend::cuda {

/// Workspace cuBLASLt may use per call (what NVIDIA advises for Hopper).
inline constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;

/// The device's cuBLASLt handle, created on first use.
cublasLtHandle_t lt_handle(int device);

/// kLtWorkspaceBytes of device memory for calls on `stream`.
void* lt_workspace(int device, cudaStream_t stream);

}  // namespace mixgrad::backend::cuda
