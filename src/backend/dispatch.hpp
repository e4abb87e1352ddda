// The device seam. Each op family has a header in backend/ that declares the
// per-device implementations (`cpu::name`, `cuda::name`) and an inline
// `name(...)` that picks one by the output's device:
//
//   MIXGRAD_DISPATCH(device, name, (args))       CPU, or DeviceError on CUDA
//   MIXGRAD_DISPATCH_CUDA(device, name, (args))  CPU or CUDA, for families the
//                                                CUDA backend implements
//
// A family moves from the first to the second when its CUDA kernels land.
// Without the CUDA backend built, both throw DeviceError for CUDA tensors.
#pragma once

#include <string>

#include "mixgrad/error.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::backend {

/// True when mixgrad was built with its CUDA backend.
bool cuda_built();

/// CUDA devices mixgrad can use: 0 without the CUDA backend, a driver or a device.
int cuda_device_count();

/// Throws DeviceError: `op` has no CUDA implementation in this build.
[[noreturn]] void throw_no_cuda(const char* op);

}  // namespace mixgrad::backend

#define MIXGRAD_DISPATCH(device, op, call_args)      \
  do {                                               \
    if ((device).is_cpu()) return cpu::op call_args; \
    ::mixgrad::backend::throw_no_cuda(#op);          \
  } while (0)

#if MIXGRAD_WITH_CUDA
#define MIXGRAD_DISPATCH_CUDA(device, op, call_args) \
  do {                                               \
    if ((device).is_cpu()) return cpu::op call_args; \
    return cuda::op call_args;                       \
  } while (0)
#else
#define MIXGRAD_DISPATCH_CUDA(device, op, call_args) MIXGRAD_DISPATCH(device, op, call_args)
#endif
