// The bf16 dot-product peak (cpu_peak.hpp).
#include "cpu_peak.hpp"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace perf {

namespace {

#if defined(__x86_64__)
// Runs blocks of 12 x 4096 independent vdpbf16ps until `seconds` have passed;
// returns the instructions issued and the time they took.
__attribute__((target("avx512f,avx512bf16"))) double dot_loop(double seconds, double* elapsed) {
  constexpr int kAcc = 12;   // enough independent chains to cover the latency
  constexpr int kInner = 4096;
  __m512 acc[kAcc];
  for (auto& a : acc) a = _mm512_setzero_ps();
  __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0
  const auto t0 = std::chrono::steady_clock::now();
  double instructions = 0, t = 0;
  while (t < seconds) {
    for (int i = 0; i < kInner; ++i) {
#pragma GCC unroll 12
      for (int j = 0; j < kAcc; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], x, x);
      asm volatile("" : "+v"(x));  // keeps the loop from being folded
    }
    instructions += double(kAcc) * kInner;
    t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  __m512 sum = acc[0];
  for (int j = 1; j < kAcc; ++j) sum = _mm512_add_ps(sum, acc[j]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  volatile float sink = lanes[0];  // the result is used, so the loop stays
  (void)sink;
  *elapsed = t;
  return instructions;
}

// The same shape of loop for float32 FMA, on 256-bit registers and on
// 512-bit ones (one function each: the instruction set is the function's).
__attribute__((target("avx2,fma"))) double fma256_loop(double seconds, double* elapsed) {
  constexpr int kAcc = 12;
  constexpr int kInner = 4096;
  __m256 acc[kAcc];
  for (auto& a : acc) a = _mm256_setzero_ps();
  __m256 x = _mm256_set1_ps(1.0f);
  const auto t0 = std::chrono::steady_clock::now();
  double instructions = 0, t = 0;
  while (t < seconds) {
    for (int i = 0; i < kInner; ++i) {
#pragma GCC unroll 12
      for (int j = 0; j < kAcc; ++j) acc[j] = _mm256_fmadd_ps(x, x, acc[j]);
      asm volatile("" : "+x"(x));
    }
    instructions += double(kAcc) * kInner;
    t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  volatile float sink = 0;
  for (int j = 0; j < kAcc; ++j) sink = sink + _mm256_cvtss_f32(acc[j]);
  *elapsed = t;
  return instructions;
}

__attribute__((target("avx512f"))) double fma512_loop(double seconds, double* elapsed) {
  constexpr int kAcc = 12;
  constexpr int kInner = 4096;
  __m512 acc[kAcc];
  for (auto& a : acc) a = _mm512_setzero_ps();
  __m512 x = _mm512_set1_ps(1.0f);
  const auto t0 = std::chrono::steady_clock::now();
  double instructions = 0, t = 0;
  while (t < seconds) {
    for (int i = 0; i < kInner; ++i) {
#pragma GCC unroll 12
      for (int j = 0; j < kAcc; ++j) acc[j] = _mm512_fmadd_ps(x, x, acc[j]);
      asm volatile("" : "+v"(x));
    }
    instructions += double(kAcc) * kInner;
    t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  volatile float sink = 0;
  for (int j = 0; j < kAcc; ++j) sink = sink + _mm512_cvtss_f32(acc[j]);
  *elapsed = t;
  return instructions;
}
#endif

// `threads` threads each running `loop` at once; GFLOP/s over all of them.
double run_threads(int threads, double seconds, double flops_per_instruction, double (*loop)(double, double*)) {
  std::vector<double> rate(static_cast<size_t>(threads), 0);
  std::atomic<int> ready{0};
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i)
    pool.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < threads) {
      }
      double t = 0;
      const double n = loop(seconds, &t);
      rate[static_cast<size_t>(i)] = n * flops_per_instruction / t / 1e9;
    });
  for (auto& th : pool) th.join();
  double total = 0;
  for (double r : rate) total += r;
  return total;
}

}  // namespace

double fma_peak_gflops(int threads, int bits, double seconds) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (threads < 1) return 0;
  if (bits == 256 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return run_threads(threads, seconds, 16.0, fma256_loop);
  if (bits == 512 && __builtin_cpu_supports("avx512f")) return run_threads(threads, seconds, 32.0, fma512_loop);
#else
  (void)threads;
  (void)bits;
  (void)seconds;
#endif
  return 0;
}

double bf16_dot_peak_gflops(int threads, double seconds) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bf16") || threads < 1) return 0;
  return run_threads(threads, seconds, 64.0, dot_loop);
#else
  (void)threads;
  (void)seconds;
  return 0;
#endif
}

}  // namespace perf
