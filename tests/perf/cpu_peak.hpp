// tests/perf/cpu_peak.hpp — what the CPU's bf16 and float32 units can do at most.
//
//   double p = perf::bf16_dot_peak_gflops(2);   // 0 where the CPU has no AVX-512 BF16
//   double f = perf::fma_peak_gflops(2, 256);   // float32 FMA, AVX2 (512: AVX-512; 0 without)
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

/// The same for float32 fused multiply-adds (vfmadd231ps) on `bits`-wide
/// registers, 256 (AVX2 + FMA: 16 flops an instruction) or 512 (AVX-512:
/// 32); 0 where the CPU lacks them. The float32 GEMM's ceiling.
double fma_peak_gflops(int threads, int bits, double seconds = 0.3);

}  // namespace perf
