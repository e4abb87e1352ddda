// The header line of every benchmark: the CPU and what mixgrad runs on it
// (mg::cpu::describe), so every figure says what it was measured on. Kept
// out of bench_harness.hpp, which the LibTorch side includes without
// mixgrad's headers.
//
//   perf::print_cpu_line();   // - CPU: AMD EPYC 7B13 | AVX2 FMA F16C | kernels avx2, ...
#pragma once

#include <cstdio>
#include <string>

#include <mixgrad/cpu.hpp>

namespace perf {

inline std::string cpu_description() { return mixgrad::cpu::describe(mixgrad::cpu::capabilities()); }
inline void print_cpu_line() { std::printf("- CPU: %s\n", cpu_description().c_str()); }

}  // namespace perf
