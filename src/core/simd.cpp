#include "core/simd.hpp"

#include <atomic>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace mixgrad::simd {

namespace {

#if defined(__x86_64__) || defined(__i386__)
// CPUID leaf 1, ECX: clang (up to 15) does not accept "f16c" in
// __builtin_cpu_supports. F16C uses the AVX register state, whose OS support
// __builtin_cpu_supports("avx2") checks.
bool cpuid_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

Level detect() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpuid_f16c() &&
                      __builtin_cpu_supports("bmi2");
  return avx512 ? Level::avx512 : Level::portable;
#else
  return Level::portable;
#endif
}

std::atomic<Level>& current() {
  static std::atomic<Level> l{detected()};
  return l;
}

}  // namespace

Level detected() {
  static const Level l = detect();
  return l;
}

bool has_avx2_f16c() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && cpuid_f16c();
  }();
  return yes;
#else
  return false;
#endif
}

Level level() { return current().load(std::memory_order_relaxed); }

LevelScope::LevelScope(Level cap) : previous_(level()) {
  const Level d = detected();
  current().store(static_cast<uint8_t>(cap) < static_cast<uint8_t>(d) ? cap : d, std::memory_order_relaxed);
}

LevelScope::~LevelScope() { current().store(previous_, std::memory_order_relaxed); }

}  // namespace mixgrad::simd
