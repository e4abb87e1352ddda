// Bulk float <-> 16-bit conversions. float16 uses F16C when the CPU has it
// (vcvtps2ph rounds to nearest even and handles NaN, inf and subnormals as
// IEEE says, matching the scalar path bit for bit); bfloat16's scalar path is
// integer arithmetic that the compiler vectorises.
#include "mixgrad/half.hpp"

#include <immintrin.h>

namespace mixgrad {

namespace {

bool has_f16c() {
  static const bool yes = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2");
  return yes;
}

__attribute__((target("avx2,f16c"))) void f32_to_f16_f16c(const float* src, half* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(src + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) dst[i] = half(src[i]);
}

__attribute__((target("avx2,f16c"))) void f16_to_f32_f16c(const half* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(v));
  }
  for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

}  // namespace

void convert(const float* src, half* dst, int64_t n) {
  if (has_f16c()) return f32_to_f16_f16c(src, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = half(src[i]);
}

void convert(const half* src, float* dst, int64_t n) {
  if (has_f16c()) return f16_to_f32_f16c(src, dst, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

void convert(const float* src, bfloat16* dst, int64_t n) {
  const uint32_t* s = reinterpret_cast<const uint32_t*>(src);
  uint16_t* d = reinterpret_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t x = s[i];
    const bool nan = (x & 0x7fffffffu) > 0x7f800000u;
    const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    d[i] = static_cast<uint16_t>(nan ? ((x >> 16) | 0x40u) : rounded);
  }
}

void convert(const bfloat16* src, float* dst, int64_t n) {
  const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
  uint32_t* d = reinterpret_cast<uint32_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<uint32_t>(s[i]) << 16;
}

}  // namespace mixgrad
