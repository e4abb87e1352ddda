// tests/perf/libtorch_autocast.hpp — a scope of LibTorch autocast for the
// LibTorch sides of the benchmarks (compiled with LibTorch's headers only).
//
//   { perf::Autocast ac(/*cuda=*/false); ... }   // CPU autocast to bfloat16
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#ifndef MIXGRAD_TORCH_VERSION
#define MIXGRAD_TORCH_VERSION (TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR)
#endif

namespace perf {

// LibTorch's C++ API has no autocast guard; this is what torch.autocast
// does on entry and exit (the cast cache is dropped when the outermost
// region ends). `cuda`: CUDA autocast to float16, else CPU autocast to bfloat16.
class Autocast {
 public:
  explicit Autocast(bool cuda) : cuda_(cuda) {
#if MIXGRAD_TORCH_VERSION >= 204  // device-type autocast API
    const at::DeviceType type = cuda ? at::kCUDA : at::kCPU;
    at::autocast::set_autocast_enabled(type, true);
    at::autocast::set_autocast_dtype(type, cuda ? at::kHalf : at::kBFloat16);
#else
    if (cuda) {
      at::autocast::set_enabled(true);
      at::autocast::set_autocast_gpu_dtype(at::kHalf);
    } else {
      at::autocast::set_cpu_enabled(true);
      at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    }
#endif
    at::autocast::increment_nesting();
  }
  ~Autocast() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#if MIXGRAD_TORCH_VERSION >= 204  // device-type autocast API
    at::autocast::set_autocast_enabled(cuda_ ? at::kCUDA : at::kCPU, false);
#else
    if (cuda_) at::autocast::set_enabled(false);
    else at::autocast::set_cpu_enabled(false);
#endif
  }
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool cuda_;
};

}  // namespace perf
