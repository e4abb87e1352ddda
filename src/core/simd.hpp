// Which vector instruction set the CPU kernels use, chosen once at run time.
// Kernels written as plain loops are compiled for the build's baseline and,
// inside functions marked with MIXGRAD_AVX2_TARGET or MIXGRAD_AVX512_TARGET,
// for those instruction sets; level() says which variant runs. Every variant
// computes the same thing in the same order, so results do not depend on the
// machine. Whether bfloat16 matrix products run on 16-bit dot-product units
// (AVX512-BF16, AMX) or are computed in float32 from 16-bit storage is
// bf16_math().
//
// The environment variable MIXGRAD_MAX_CPU_ISA caps all of it for the process
// (and oneDNN's ISA with it, unless ONEDNN_MAX_CPU_ISA is set): `portable`,
// `avx2`, `avx512` (no 16-bit math) or `avx512_bf16` / `all` (no cap, and
// 16-bit math wherever the instructions exist, even where it is slower than
// float32: how the tests reach that path on any such CPU). CI runs
// the op registry at `avx2`, so the paths of a CPU without AVX-512 are tested
// on every machine. Tests cap it within a process with LevelScope:
//
//   if (simd::level() >= simd::Level::avx2) return sum_avx2(p, n);
//   simd::LevelScope portable(simd::Level::portable);  // tests: baseline code only
#pragma once

#include <cstdint>
#include <string_view>

namespace mixgrad::simd {

enum class Level : uint8_t {
  portable,  // the build's baseline instruction set
  avx2,      // AVX2 with FMA and F16C (x86-64-v3)
  avx512,    // AVX-512 F/BW/DQ/VL with FMA and F16C (x86-64-v4)
};

/// The instruction-set lists of the variants, for __attribute__((target(...))).
#define MIXGRAD_AVX2_TARGET "avx2,fma,f16c,bmi2"
#define MIXGRAD_AVX512_TARGET "avx2,fma,f16c,bmi2,avx512f,avx512bw,avx512dq,avx512vl"

/// The CPU's instruction sets, read once from CPUID (AVX-512 only where the
/// operating system saves its registers). The one place mixgrad reads them.
struct Flags {
  bool avx2 = false, fma = false, f16c = false, bmi2 = false;
  bool avx512 = false;  // F, BW, DQ and VL
  bool avx512_bf16 = false, avx512_fp16 = false;
  bool amx_bf16 = false, amx_fp16 = false;  // with AMX tiles
};
const Flags& flags();

/// What this CPU supports (detected once), before any cap.
Level detected();

/// detected() under MIXGRAD_MAX_CPU_ISA: the highest level a LevelScope can
/// give. Tests compare the variants up to this one.
Level available();

/// Whether the CPU (x86) has AVX2 and F16C, whatever level() says.
bool has_avx2_f16c();

/// Whether the CPU has bfloat16 dot-product instructions (AVX512-BF16 or
/// AMX-BF16), whatever the caps say.
bool has_bf16_dot();

/// The cap MIXGRAD_MAX_CPU_ISA sets, as its canonical name ("" when unset).
/// ValueError naming the variable and the accepted values for anything else.
std::string_view max_isa_name();

/// The level kernels use now: detected(), lowered by MIXGRAD_MAX_CPU_ISA and
/// by an open LevelScope.
Level level();

/// How many times the float32 FMA rate (AVX-512, flops per second) this
/// core's AVX512-BF16 dot products (vdpbf16ps) reach: measured once, in
/// about a millisecond, on first use; 0 without AVX512-BF16. 0.5 measured on
/// an Emerald Rapids guest without AMX, where only AMX tiles would make
/// bfloat16 products faster than float32 ones; 1.82-1.87 on an AMD Zen 5,
/// whose oneDNN bfloat16 matmul runs about twice as fast as float32.
double bf16_dot_speedup();

/// bf16_dot_speedup() at which 16-bit products pay: below it, converting to
/// float32 and running the float32 kernels is faster.
inline constexpr double kBf16DotPays = 1.25;

/// Whether bfloat16 products run faster on this CPU's 16-bit units than in
/// float32: AMX-BF16, or AVX512-BF16 dot products at kBf16DotPays times the
/// FMA rate or more.
bool bf16_math_pays();

/// True when bfloat16 matrix products and convolutions run on the CPU's
/// 16-bit dot-product units now: has_bf16_dot(), level() is avx512,
/// MIXGRAD_MAX_CPU_ISA allows 16-bit math, and either they pay
/// (bf16_math_pays()) or MIXGRAD_MAX_CPU_ISA=all asks for them anyway. When
/// false they are computed in float32 from 16-bit storage.
bool bf16_math();

/// True when mixgrad's own kernels multiply bfloat16 pairs on AVX512-BF16's
/// vdpbf16ps (the CPU attention kernel, backend/cpu/bf16_pairs.hpp):
/// bf16_math(), the CPU has AVX512-BF16, and its dot products beat float32
/// FMAs (bf16_dot_speedup() >= kBf16DotPays) or MIXGRAD_MAX_CPU_ISA=all
/// asks for 16-bit math. AMX alone does not count: those kernels have no
/// tile path.
bool bf16_dot_products();

/// Name of a level: "portable", "avx2", "avx512".
std::string_view to_string(Level l);

/// Caps the level for its lifetime (never raises it above the process cap),
/// then restores the previous cap. Process-wide: for tests, not for
/// concurrent use.
class [[nodiscard]] LevelScope {
 public:
  explicit LevelScope(Level cap);
  ~LevelScope();
  LevelScope(const LevelScope&) = delete;
  LevelScope& operator=(const LevelScope&) = delete;

 private:
  Level previous_;
};

}  // namespace mixgrad::simd
