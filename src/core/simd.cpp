#include "core/simd.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <string>

#include "mixgrad/error.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace mixgrad::simd {

namespace {

#if defined(__x86_64__) || defined(__i386__)
bool bit(unsigned reg, int b) { return ((reg >> b) & 1u) != 0; }
#endif

Flags detect_flags() {
  Flags f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.bmi2 = __builtin_cpu_supports("bmi2");
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  // F16C from CPUID leaf 1 ECX: clang (up to 15) does not accept "f16c" in
  // __builtin_cpu_supports. It uses the AVX register state, whose OS support
  // the "avx2" check covers; the leaf-7 features below need AVX-512's.
  unsigned a = 0, b = 0, c = 0, d = 0;
  f.f16c = f.avx2 && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
  if (f.avx512 && __get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx512_fp16 = bit(d, 23);
    f.amx_bf16 = bit(d, 22) && bit(d, 24);  // AMX-BF16 and the tiles
  }
  if (f.avx512 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) {
    f.avx512_bf16 = bit(a, 5);
    f.amx_fp16 = bit(a, 21) && f.amx_bf16;
  }
#endif
  return f;
}

Level detect() {
  const Flags& f = flags();
  const bool avx2 = f.avx2 && f.fma && f.f16c && f.bmi2;
  return avx2 && f.avx512 ? Level::avx512 : avx2 ? Level::avx2 : Level::portable;
}

// MIXGRAD_MAX_CPU_ISA, parsed: the kernel level it allows, whether it
// allows 16-bit math, and whether it asks for 16-bit math even where it is
// slower than float32 (`all`).
struct ProcessCap {
  Level level = Level::avx512;
  bool half_math = true;
  std::string_view name;
  bool force_half_math = false;
};

ProcessCap parse_cap() {
  const char* env = std::getenv("MIXGRAD_MAX_CPU_ISA");
  if (env == nullptr || *env == '\0') return {};
  std::string v(env);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (v == "portable" || v == "baseline") return {Level::portable, false, "portable"};
  if (v == "avx2") return {Level::avx2, false, "avx2"};
  if (v == "avx512") return {Level::avx512, false, "avx512"};
  if (v == "avx512_bf16" || v == "all") return {Level::avx512, true, "all", true};
  throw ValueError("MIXGRAD_MAX_CPU_ISA=" + std::string(env) +
                   ": expected portable, avx2, avx512, avx512_bf16 or all");
}

const ProcessCap& process_cap() {
  static const ProcessCap cap = parse_cap();
  return cap;
}

#if defined(__x86_64__) || defined(__i386__)
// Seconds for `rounds` rounds of twelve independent vdpbf16ps (kDot: 64
// flops each) or vfmadd231ps on zmm (32 flops each): throughput loops,
// nothing else, their sums kept alive through `sink`.
constexpr int kChains = 12;

template <bool kDot>
__attribute__((target("avx512f,avx512bf16,fma"))) double time_chains(int rounds, float& sink) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(0.0f);
  const __m512 a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(1e-3f);
  const __m512bh ah = (__m512bh)_mm512_set1_epi16(0x3f80), bh = (__m512bh)_mm512_set1_epi16(0x3c00);
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < rounds; ++r)
    for (int i = 0; i < kChains; ++i) {
      if constexpr (kDot)
        acc[i] = _mm512_dpbf16_ps(acc[i], ah, bh);
      else
        acc[i] = _mm512_fmadd_ps(a, b, acc[i]);
    }
  const auto t1 = std::chrono::steady_clock::now();
  float lanes[16];
  for (int i = 0; i < kChains; ++i) {
    _mm512_storeu_ps(lanes, acc[i]);
    sink += lanes[0];
  }
  return std::chrono::duration<double>(t1 - t0).count();
}

// Where the loops' sums go, so that the compiler keeps them.
volatile float g_sink;

// vdpbf16ps flops per second over AVX-512 FMA flops per second on this core:
// the best of seven short alternating trials of each (about a millisecond
// in all), so a trial slowed by something else does not count.
double measure_bf16_dot_speedup() {
  constexpr int kRounds = 4000;
  float sink = 0;
  double dot = 1e30, fma = 1e30;
  for (int trial = 0; trial < 7; ++trial) {
    dot = std::min(dot, time_chains<true>(kRounds, sink));
    fma = std::min(fma, time_chains<false>(kRounds, sink));
  }
  g_sink = sink;
  return dot > 0 ? (64.0 / dot) / (32.0 / fma) : 0.0;
}
#endif

Level min_level(Level a, Level b) { return static_cast<uint8_t>(a) < static_cast<uint8_t>(b) ? a : b; }

// The process's level: detected() under MIXGRAD_MAX_CPU_ISA.
Level capped() { return min_level(detected(), process_cap().level); }

std::atomic<Level>& current() {
  static std::atomic<Level> l{capped()};
  return l;
}

}  // namespace

const Flags& flags() {
  static const Flags f = detect_flags();
  return f;
}

Level detected() {
  static const Level l = detect();
  return l;
}

bool has_avx2_f16c() { return flags().avx2 && flags().f16c; }

bool has_bf16_dot() { return detected() == Level::avx512 && (flags().avx512_bf16 || flags().amx_bf16); }

Level available() { return capped(); }

std::string_view max_isa_name() { return process_cap().name; }

Level level() { return current().load(std::memory_order_relaxed); }

double bf16_dot_speedup() {
#if defined(__x86_64__) || defined(__i386__)
  static const double r = flags().avx512_bf16 && detected() == Level::avx512 ? measure_bf16_dot_speedup() : 0.0;
  return r;
#else
  return 0.0;
#endif
}

bool bf16_math_pays() { return flags().amx_bf16 || bf16_dot_speedup() >= kBf16DotPays; }

bool bf16_math() {
  return has_bf16_dot() && process_cap().half_math && level() == Level::avx512 &&
         (process_cap().force_half_math || bf16_math_pays());
}

bool bf16_dot_products() {
  return bf16_math() && flags().avx512_bf16 &&
         (process_cap().force_half_math || bf16_dot_speedup() >= kBf16DotPays);
}

std::string_view to_string(Level l) {
  switch (l) {
    case Level::portable: return "portable";
    case Level::avx2: return "avx2";
    case Level::avx512: return "avx512";
  }
  return "?";
}

LevelScope::LevelScope(Level cap) : previous_(level()) {
  current().store(min_level(cap, capped()), std::memory_order_relaxed);
}

LevelScope::~LevelScope() { current().store(previous_, std::memory_order_relaxed); }

}  // namespace mixgrad::simd
