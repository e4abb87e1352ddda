// Which products of an FP8 region (mixgrad/amp/fp8.hpp) run FP8 GEMMs on
// FP8 bytes, and how many such GEMMs ran: a seam for tests and benchmarks.
//
// A linear site whose rows, inputs and outputs are multiples of 16 runs its
// forward and both gradient products as backend::fp8_gemm on E4M3 / E5M2
// codes (Transformer Engine's three FP8 GEMMs) where the device has them
// (mixgrad::cuda::fp8_gemm_available); elsewhere it is emulated in float32
// on values rounded to FP8. `always` takes the GEMM path on every device
// (the CPU's fp8_gemm is the float32 reference on the decoded codes), so the
// path is tested without a GPU; `never` emulates everywhere.
//
//   amp::detail::set_fp8_gemm_use(amp::detail::Fp8GemmUse::always);
//   const int64_t before = amp::detail::fp8_gemm_calls();
//   ... a step in an fp8_autocast region ...
//   // fp8_gemm_calls() - before == 3 per linear site (forward, dgrad, wgrad)
#pragma once

#include <cstdint>

namespace mixgrad::amp::detail {

enum class Fp8GemmUse { automatic, always, never };

/// Process-wide; automatic by default.
void set_fp8_gemm_use(Fp8GemmUse use);
Fp8GemmUse fp8_gemm_use();

/// FP8 GEMMs that FP8 sites have run in this process, on every device.
int64_t fp8_gemm_calls();

}  // namespace mixgrad::amp::detail
