// tests/perf/cpu_peak.hpp — what the CPU's bf16 units can do at most.
//
//   double p = perf::bf16_dot_peak_gflops(2);   // 0 where the CPU has no AVX-512 BF16
//
// The benchmarks compare mixgrad with oneDNN's GEMM and with LibTorch; this
// is the ceiling above both: a loop of independent vdpbf16ps instructions
// (twelve accumulators, nothing else), one per thread, all threads at once.
// Each instruction does 32 bf16 products and adds them into 16 float lanes:
// 64 floating-point operations. A training step cannot do its matrix
// products faster than this, whatever the GEMM.
#pragma once

namespace perf {

/// GFLOP/s of `threads` threads each running the vdpbf16ps loop for about
/// `seconds`; 0 without AVX-512 BF16.
double bf16_dot_peak_gflops(int threads, double seconds = 0.3);

}  // namespace perf
