// mixgrad/cpu.hpp — what this CPU can do, and what mixgrad uses of it.
//
//   const mg::cpu::Capabilities& caps = mg::cpu::capabilities();
//   std::printf("%s\n", mg::cpu::describe(caps).c_str());
//   // Intel(R) Xeon(R) Processor | AVX2 FMA F16C AVX-512 AVX512-BF16 AVX512-FP16 AMX-BF16 |
//   //   kernels avx512, bfloat16 math native (vdpbf16ps at 0.50x the FMA rate), float16 computed in
//   //   float32 | oneDNN 2.6.3 avx512_core_amx
//   if (!mg::cpu::has_fast_math(mg::DType::bfloat16)) { /* autocast saves memory, not time */ }
//
// On a CPU without 16-bit arithmetic (AVX2 machines: Intel client CPUs,
// Skylake to Ice Lake servers, AMD Zen 2 and Zen 3), bfloat16 and float16
// tensors are stored in 16 bits and their matrix products and convolutions
// computed in float32: autocast then halves activation memory and traffic,
// and costs about what float32 does. The same holds where AVX512-BF16's dot
// products are slower than float32 FMAs (Intel Xeons without AMX, or with
// AMX hidden by a hypervisor): mixgrad measures that rate once and uses
// 16-bit math only where it pays. The environment variable
// MIXGRAD_MAX_CPU_ISA (portable, avx2, avx512, all) makes mixgrad behave as
// on a lesser CPU (`all`: 16-bit math wherever the instructions exist); it
// caps oneDNN too unless ONEDNN_MAX_CPU_ISA is set.
#pragma once

#include <string>

#include "mixgrad/dtype.hpp"

namespace mixgrad::cpu {

/// The CPU's instruction sets, and the choices mixgrad made from them.
struct Capabilities {
  std::string model;  ///< CPUID's brand string, e.g. "AMD EPYC 7B13"
  // What the hardware and operating system support.
  bool avx2 = false;         ///< AVX2
  bool fma = false;          ///< FMA3
  bool f16c = false;         ///< F16C: float16 <-> float32 conversions
  bool avx512 = false;       ///< AVX-512 F, BW, DQ and VL
  bool avx512_bf16 = false;  ///< bfloat16 dot products (vdpbf16ps)
  bool avx512_fp16 = false;  ///< float16 arithmetic
  bool amx_bf16 = false;     ///< AMX tiles with bfloat16
  bool amx_fp16 = false;     ///< AMX tiles with float16
  // What mixgrad uses now.
  std::string kernels;       ///< instruction set of mixgrad's own loops: "avx512", "avx2" or "portable"
  std::string max_isa;       ///< MIXGRAD_MAX_CPU_ISA as understood ("" when unset)
  bool bf16_math = false;    ///< bfloat16 products run on 16-bit units (else in float32)
  /// vdpbf16ps flops per second over AVX-512 FMA flops per second, measured
  /// once on first use (0 without AVX512-BF16): 0.5 on an Intel Xeon
  /// (Emerald Rapids), whose bfloat16 products pay only on AMX tiles;
  /// 1.82-1.87 on an AMD Zen 5, whose oneDNN bfloat16 matmul runs about twice
  /// as fast as float32.
  /// bfloat16 math is used where AMX-BF16 exists or this is 1.25 or more
  /// (or where MIXGRAD_MAX_CPU_ISA=all asks for it).
  double bf16_dot_speedup = 0;
  bool fp16_math = false;    ///< float16 products run on 16-bit units (else in float32)
  std::string onednn;        ///< "2.6.3 avx512_core_amx": oneDNN's version and the ISA it runs; "" without oneDNN
};

/// The capabilities of the CPU this process runs on. The hardware fields are
/// detected once; the fields saying what mixgrad uses are read anew each
/// call. ValueError when MIXGRAD_MAX_CPU_ISA holds an unknown value.
Capabilities capabilities();

/// One line for logs and benchmark headers: the model, the instruction sets
/// and what mixgrad runs with them.
std::string describe(const Capabilities& caps);

/// True when matrix products and convolutions in `dtype` run at least as fast
/// as in float32 here: float32 and float64 always, bfloat16 with bfloat16 dot
/// products in use, float16 never on CPUs (oneDNN 2.6 has no float16
/// kernels). Where it is false, autocast to `dtype` saves memory but not time.
bool has_fast_math(DType dtype);

}  // namespace mixgrad::cpu
