// What every grid-stride kernel family of the CUDA backend shares: the loop
// over a linear index and the place a launch runs (the tensor's device made
// current for the scope, and that device's current stream).
//
//   __global__ void k(const float* x, float* y, int64_t n) {
//     MIXGRAD_GRID_STRIDE_LOOP(i, n) y[i] = 2 * x[i];
//   }
//   LaunchOn on(y);                                   // guard + stream of y's device
//   const auto lc = cuda_plan::launch_config(n);      // lc.blocks == 0: nothing to launch
//   if (lc.blocks) k<<<lc.blocks, lc.threads, 0, on.stream>>>(xp, yp, n);
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/check.hpp"
#include "backend/cuda/stream.hpp"
#include "mixgrad/tensor.hpp"

/// `for` over i = this thread's first index, stepping by the whole grid,
/// while i < n; i is int64_t, so tensors past 2^31 elements index correctly.
#define MIXGRAD_GRID_STRIDE_LOOP(i, n)                                                    \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

namespace mixgrad::backend::cuda {

/// The device of `t` made current for this scope, and its current stream.
struct LaunchOn {
  int device;
  DeviceGuard guard;
  cudaStream_t stream;
  explicit LaunchOn(const Tensor& t) : device(t.device().index()), guard(device), stream(current_stream(device)) {}
};

}  // namespace mixgrad::backend::cuda
