// tests/perf/bench_gpu.hpp — the GPU half of the training benchmark
// (`bench_vs_libtorch --device cuda`; bench_gpu.cpp, docs/cuda.md "GPU benchmark").
//
//   perf::GpuConfig g{.device = 0};
//   return perf::run_gpu_benchmark(g);   // 0; 77 without a CUDA device (the reason printed last)
//
// On one CUDA device, for each side built in (mixgrad, and LibTorch where
// found with CUDA): MLP, CNN and ResNet training steps in fp32 and fp16
// autocast with loss scaling, the fp16 / fp32 speed-up, peak GPU memory of
// each, and a large MLP (4096 wide, batch 1024) against the bare GEMM rate
// of the same shapes.
#pragma once

#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "bench_sides.hpp"

namespace perf {

struct GpuConfig {
  int device = 0;  // CUDA index
  TimingOptions timing;
  std::vector<Model> models;  // empty: MLP, CNN, ResNet and MLP-4096
  std::string only_side;      // empty: every side that has CUDA
};

/// Prints the GPU benchmark's tables; returns the process exit status: 0,
/// 1 (a model failed), 77 (skipped: no CUDA device; the last line printed
/// says why) or 2 (no such device or side).
int run_gpu_benchmark(const GpuConfig& config);

}  // namespace perf
