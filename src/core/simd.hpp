// Which vector instruction set the CPU kernels use, chosen once at run time.
// Kernels written as plain loops are compiled twice: as they are (portable,
// the build's baseline), and inside functions marked kAvx512Target, which
// run only when simd_level() says the CPU has those instructions. Both
// variants compute the same thing in the same order, so results do not
// depend on the machine; tests use SimdLevelScope to run the portable
// variant on a CPU that has AVX-512 too.
//
//   if (simd::level() == simd::Level::avx512) return sum_avx512(p, n);
//   return sum_portable(p, n);
//
//   simd::LevelScope portable(simd::Level::portable);  // tests: baseline code only
#pragma once

#include <cstdint>

namespace mixgrad::simd {

enum class Level : uint8_t {
  portable,  // the build's baseline instruction set
  avx512,    // AVX-512 F/BW/DQ/VL with FMA and F16C (x86-64-v4)
};

/// The instruction-set list of the AVX-512 variants, for __attribute__((target(...))).
#define MIXGRAD_AVX512_TARGET "avx2,fma,f16c,bmi2,avx512f,avx512bw,avx512dq,avx512vl"

/// What this CPU supports (detected once).
Level detected();

/// Whether the CPU (x86) has AVX2 and F16C, whatever level() says.
bool has_avx2_f16c();

/// The level kernels use now: detected(), or lower while a LevelScope caps it.
Level level();

/// Caps the level for its lifetime (never raises it above detected()), then
/// restores the previous cap. Process-wide: for tests, not for concurrent use.
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
