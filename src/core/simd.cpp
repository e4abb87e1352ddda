#include "core/simd.hpp"

#include <atomic>

namespace mixgrad::simd {

namespace {

Level detect() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                      __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
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

Level level() { return current().load(std::memory_order_relaxed); }

LevelScope::LevelScope(Level cap) : previous_(level()) {
  const Level d = detected();
  current().store(static_cast<uint8_t>(cap) < static_cast<uint8_t>(d) ? cap : d, std::memory_order_relaxed);
}

LevelScope::~LevelScope() { current().store(previous_, std::memory_order_relaxed); }

}  // namespace mixgrad::simd
