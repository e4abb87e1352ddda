// The bf16 dot-product and float32 FMA peaks (cpu_peak.hpp).
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

// One block: kInner rounds of kAcc independent instructions (enough chains
// to cover the latency) on a constant operand, then the lanes summed so the
// work is kept. One function per instruction: its instruction set is the
// function's.
constexpr int kAcc = 12;
constexpr int kInner = 4096;

#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bf16"))) float dot_block() {
  __m512 acc[kAcc];
  for (auto& a : acc) a = _mm512_setzero_ps();
  __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80);  // bf16 1.0
  for (int i = 0; i < kInner; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kAcc; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], x, x);
    asm volatile("" : "+v"(x));  // keeps the loop from being folded
  }
  for (int j = 1; j < kAcc; ++j) acc[0] = _mm512_add_ps(acc[0], acc[j]);
  return _mm512_cvtss_f32(acc[0]);
}

__attribute__((target("avx2,fma"))) float fma256_block() {
  __m256 acc[kAcc];
  for (auto& a : acc) a = _mm256_setzero_ps();
  __m256 x = _mm256_set1_ps(1.0f);
  for (int i = 0; i < kInner; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kAcc; ++j) acc[j] = _mm256_fmadd_ps(x, x, acc[j]);
    asm volatile("" : "+x"(x));
  }
  for (int j = 1; j < kAcc; ++j) acc[0] = _mm256_add_ps(acc[0], acc[j]);
  return _mm256_cvtss_f32(acc[0]);
}

__attribute__((target("avx512f"))) float fma512_block() {
  __m512 acc[kAcc];
  for (auto& a : acc) a = _mm512_setzero_ps();
  __m512 x = _mm512_set1_ps(1.0f);
  for (int i = 0; i < kInner; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kAcc; ++j) acc[j] = _mm512_fmadd_ps(x, x, acc[j]);
    asm volatile("" : "+v"(x));
  }
  for (int j = 1; j < kAcc; ++j) acc[0] = _mm512_add_ps(acc[0], acc[j]);
  return _mm512_cvtss_f32(acc[0]);
}
#endif

// Runs `block` until `seconds` have passed; returns the instructions issued
// and the time they took.
double timed_blocks(double seconds, double* elapsed, float (*block)()) {
  const auto t0 = std::chrono::steady_clock::now();
  double instructions = 0, t = 0;
  volatile float sink = 0;  // the results are used, so the blocks stay
  while (t < seconds) {
    sink = sink + block();
    instructions += double(kAcc) * kInner;
    t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  *elapsed = t;
  return instructions;
}

// `threads` threads each running `loop` at once; GFLOP/s over all of them.
double run_threads(int threads, double seconds, double flops_per_instruction, float (*block)()) {
  std::vector<double> rate(static_cast<size_t>(threads), 0);
  std::atomic<int> ready{0};
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i)
    pool.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < threads) {
      }
      double t = 0;
      const double n = timed_blocks(seconds, &t, block);
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
    return run_threads(threads, seconds, 16.0, fma256_block);
  if (bits == 512 && __builtin_cpu_supports("avx512f")) return run_threads(threads, seconds, 32.0, fma512_block);
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
  return run_threads(threads, seconds, 64.0, dot_block);
#else
  (void)threads;
  (void)seconds;
  return 0;
#endif
}

}  // namespace perf
