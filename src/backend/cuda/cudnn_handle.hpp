// The cuDNN handle of the calling thread on one device, its stream set to
// that device's current stream. Per thread: a handle's stream is state, and
// setting it from two threads at once would race. Never destroyed (process
// exit may come after the CUDA runtime's).
//
//   const cudnnHandle_t h = cuda::cudnn_handle(device, "conv2d");
//
// Shared by the convolutions (cuda/conv.cpp) and fused attention
// (cuda/attention.cpp): one handle per thread and device for both.
#pragma once

#include <cudnn.h>

#include <array>
#include <string>

#include "backend/cuda/stream.hpp"
#include "mixgrad/error.hpp"

namespace mixgrad::backend::cuda {

/// DeviceError "<op>: cuDNN error <text> in <call>" unless status is success.
inline void check_cudnn(cudnnStatus_t status, const char* op, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS)
    throw DeviceError(std::string(op) + ": cuDNN error " + cudnnGetErrorString(status) + " in " + call);
}

inline cudnnHandle_t cudnn_handle(int device, const char* op) {
  thread_local std::array<cudnnHandle_t, kMaxDevices> handles{};
  if (!handles[device]) check_cudnn(cudnnCreate(&handles[device]), op, "cudnnCreate");
  check_cudnn(cudnnSetStream(handles[device], current_stream(device)), op, "cudnnSetStream");
  return handles[device];
}

}  // namespace mixgrad::backend::cuda
