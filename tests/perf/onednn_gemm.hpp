// tests/perf/onednn_gemm.hpp — oneDNN's own matrix product, called directly,
// as the ceiling for the roofline rows of the training benchmark.
//
//   auto gemm = perf::make_onednn_gemm(256, 1024, 1024, perf::Precision::bf16);
//   if (gemm) gemm->run();            // one [256,1024] x [1024,1024] product
//
// It is the oneDNN that mixgrad itself links, with plain row-major operands
// as mixgrad passes them (fp32: f32 in and out; bf16: bf16 in and out, as a
// bf16 matmul under autocast). 2*m*k*n floating-point operations per run.
#pragma once

#include <cstdint>
#include <memory>

#include "bench_sides.hpp"

namespace perf {

/// A Runner doing one m x k by k x n product; null when this build has no
/// oneDNN or oneDNN has no kernel for the precision on this CPU.
std::unique_ptr<Runner> make_onednn_gemm(int64_t m, int64_t k, int64_t n, Precision precision);

/// oneDNN's version ("2.6.3"), or "none" when the build has no oneDNN. A static string.
const char* onednn_version();

}  // namespace perf
