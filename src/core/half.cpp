// Bulk float <-> 16-bit conversions, bit for bit equal to the scalar
// conversions of half.hpp on every input. float16 uses the hardware
// conversion (vcvtps2ph / vcvtph2ps round to nearest even and handle NaN,
// inf and subnormals as IEEE says, matching the scalar path); bfloat16 uses
// the scalar path's integer rounding on 16 lanes at a time. The AVX-512 BF16
// instruction (vcvtneps2bf16) is not used: it flushes subnormal inputs to
// zero, where the scalar conversion rounds them.
#include "mixgrad/half.hpp"

#include <immintrin.h>

#include <cstring>

#include "core/simd.hpp"

namespace mixgrad {

namespace {

// ---- portable ------------------------------------------------------------------

[[gnu::always_inline]] inline void f32_to_bf16_loop(const float* src, bfloat16* dst, int64_t n) {
  const uint32_t* s = reinterpret_cast<const uint32_t*>(src);
  uint16_t* d = reinterpret_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t x = s[i];
    const bool nan = (x & 0x7fffffffu) > 0x7f800000u;
    const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    d[i] = static_cast<uint16_t>(nan ? ((x >> 16) | 0x40u) : rounded);
  }
}

[[gnu::always_inline]] inline void bf16_to_f32_loop(const bfloat16* src, float* dst, int64_t n) {
  const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
  uint32_t* d = reinterpret_cast<uint32_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<uint32_t>(s[i]) << 16;
}

void f32_to_bf16_portable(const float* src, bfloat16* dst, int64_t n) { f32_to_bf16_loop(src, dst, n); }
void bf16_to_f32_portable(const bfloat16* src, float* dst, int64_t n) { bf16_to_f32_loop(src, dst, n); }

#if defined(__x86_64__) || defined(__i386__)

bool has_f16c() { return simd::has_avx2_f16c(); }

// The portable bfloat16 loops, vectorised by the compiler 8 lanes at a time.
__attribute__((target(MIXGRAD_AVX2_TARGET))) void f32_to_bf16_avx2(const float* src, bfloat16* dst, int64_t n) {
  f32_to_bf16_loop(src, dst, n);
}
__attribute__((target(MIXGRAD_AVX2_TARGET))) void bf16_to_f32_avx2(const bfloat16* src, float* dst, int64_t n) {
  bf16_to_f32_loop(src, dst, n);
}
bool avx2() { return simd::level() >= simd::Level::avx2; }

__attribute__((target("avx2,f16c"))) void f32_to_f16_f16c(const float* src, half* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(src + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  if (i < n) {  // the tail through one padded vector, not the software conversion
    alignas(32) float in[8] = {};
    alignas(16) half out[8];
    std::memcpy(in, src + i, static_cast<size_t>(n - i) * sizeof(float));
    _mm_store_si128(reinterpret_cast<__m128i*>(out), _mm256_cvtps_ph(_mm256_load_ps(in), _MM_FROUND_TO_NEAREST_INT));
    std::memcpy(dst + i, out, static_cast<size_t>(n - i) * sizeof(half));
  }
}

__attribute__((target("avx2,f16c"))) void f16_to_f32_f16c(const half* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(v));
  }
  if (i < n) {
    alignas(16) half in[8] = {};
    alignas(32) float out[8];
    std::memcpy(in, src + i, static_cast<size_t>(n - i) * sizeof(half));
    _mm256_store_ps(out, _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(in))));
    std::memcpy(dst + i, out, static_cast<size_t>(n - i) * sizeof(float));
  }
}

// ---- AVX-512 -------------------------------------------------------------------
// Tails use masked loads and stores, so no element goes through a scalar loop.
// GCC 12 warns inside its own headers that the "undefined" register some
// of these intrinsics start from may be used uninitialised; it is not.
// (GCC only: clang has no -Wmaybe-uninitialized and warns of the unknown name.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

__attribute__((target(MIXGRAD_AVX512_TARGET))) inline __mmask16 tail_mask(int64_t r) {
  return static_cast<__mmask16>(_bzhi_u32(0xffffu, static_cast<unsigned>(r)));
}

// 16 floats (as bits) -> 16 bfloat16 bits: round to nearest even, NaN -> quiet NaN.
__attribute__((target(MIXGRAD_AVX512_TARGET))) inline __m256i bf16_round(__m512i x) {
  const __m512i abs = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  const __m512i bias = _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(x, bias), 16);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet));
}

__attribute__((target(MIXGRAD_AVX512_TARGET))) void f32_to_bf16_avx512(const float* src, bfloat16* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i a = bf16_round(_mm512_loadu_si512(src + i));
    const __m256i b = bf16_round(_mm512_loadu_si512(src + i + 16));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i + 16), b);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m256i v = bf16_round(_mm512_maskz_loadu_epi32(m, src + i));
    _mm256_mask_storeu_epi16(dst + i, m, v);
  }
}

__attribute__((target(MIXGRAD_AVX512_TARGET))) void bf16_to_f32_avx512(const bfloat16* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i a = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m512i b = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 16)));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(a, 16));
    _mm512_storeu_si512(dst + i + 16, _mm512_slli_epi32(b, 16));
  }
  for (; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, src + i));
    _mm512_mask_storeu_epi32(dst + i, m, _mm512_slli_epi32(v, 16));
  }
}

__attribute__((target(MIXGRAD_AVX512_TARGET))) void f32_to_f16_avx512(const float* src, half* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), h);
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_mask_storeu_epi16(dst + i, m, h);
  }
}

__attribute__((target(MIXGRAD_AVX512_TARGET))) void f16_to_f32_avx512(const half* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, src + i)));
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

bool avx512() { return simd::level() == simd::Level::avx512; }

#else

bool has_f16c() { return false; }
bool avx512() { return false; }
bool avx2() { return false; }

#endif

}  // namespace

void convert(const float* src, half* dst, int64_t n) {
#if defined(__x86_64__) || defined(__i386__)
  if (avx512()) return f32_to_f16_avx512(src, dst, n);
  if (avx2() || has_f16c()) return f32_to_f16_f16c(src, dst, n);  // the AVX2 level implies F16C
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = half(src[i]);
}

void convert(const half* src, float* dst, int64_t n) {
#if defined(__x86_64__) || defined(__i386__)
  if (avx512()) return f16_to_f32_avx512(src, dst, n);
  if (avx2() || has_f16c()) return f16_to_f32_f16c(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}

void convert(const float* src, bfloat16* dst, int64_t n) {
#if defined(__x86_64__) || defined(__i386__)
  if (avx512()) return f32_to_bf16_avx512(src, dst, n);
  if (avx2()) return f32_to_bf16_avx2(src, dst, n);
#endif
  f32_to_bf16_portable(src, dst, n);
}

void convert(const bfloat16* src, float* dst, int64_t n) {
#if defined(__x86_64__) || defined(__i386__)
  if (avx512()) return bf16_to_f32_avx512(src, dst, n);
  if (avx2()) return bf16_to_f32_avx2(src, dst, n);
#endif
  bf16_to_f32_portable(src, dst, n);
}

}  // namespace mixgrad
