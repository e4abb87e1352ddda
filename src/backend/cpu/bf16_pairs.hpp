// bfloat16 products on AVX512-BF16's dot-product instruction, for the CPU
// attention kernel on CPUs where it beats float32 FMAs (AMD Zen 4 and 5:
// `vdpbf16ps` at about twice the rate; see simd::bf16_dot_speedup).
//
// vdpbf16ps multiplies 32-bit words of two bfloat16 each, pairwise, and adds
// both products to a float lane. A product c = a b over k therefore reads
// its operands in pairs along k: a as words (a[i][2p], a[i][2p + 1]), b as
// rows of words (b[2p][j], b[2p + 1][j]), "pair rows". The packers build
// both from rows of a bfloat16 head; an odd k is padded with a zero half.
// Two bfloat16 multiply exactly in float, so a product of two bfloat16
// operands loses nothing against float32 FMAs but the order of its sums.
//
//   bf16_pairs::pack_rows(k, row, j0, j1, E, kw, pairs(E));          // K rows as words
//   bf16_pairs::pack_transposed(q, row, i0, i1, E, qt, ld);          // Q^T as pair rows
//   bf16_pairs::gemm<tiles::overwrite>(m, n, pairs(E), kw, pairs(E), 1, qt, ld, s, lds);  // s = K Q^T
//
// Everything but gemm is plain C++ inlined into its caller; gemm is compiled
// for AVX-512 with AVX512-BF16 and may only run where simd::flags() has it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "backend/cpu/attention_tiles.hpp"
#include "mixgrad/half.hpp"

namespace mixgrad::backend::cpu::bf16_pairs {

/// Two bfloat16 in a 32-bit word: the element of even index in the low half.
using Pair = uint32_t;

/// Pairs that hold n elements.
constexpr int64_t pairs(int64_t n) { return (n + 1) / 2; }

[[gnu::always_inline]] inline Pair pair(uint16_t lo, uint16_t hi) {
  return static_cast<Pair>(lo) | (static_cast<Pair>(hi) << 16);
}

/// Rows [r0, r1) of a bfloat16 head (rows `row` elements apart) as words
/// along the row: dst[(r - r0) * ld + p] = (src[r][2p], src[r][2p + 1]).
inline void pack_rows(const bfloat16* src, int64_t row, int64_t r0, int64_t r1, int64_t cols, Pair* dst,
                      int64_t ld) {
  for (int64_t r = r0; r < r1; ++r) {
    const bfloat16* s = src + r * row;
    Pair* d = dst + (r - r0) * ld;
    for (int64_t p = 0; p < cols / 2; ++p) d[p] = pair(s[2 * p].bits, s[2 * p + 1].bits);
    if (cols % 2) d[cols / 2] = pair(s[cols - 1].bits, 0);
  }
}

/// The same rows transposed into pair rows: dst[p * ld + (r - r0)] =
/// (src[r][2p], src[r][2p + 1]), so that (rows)^T is a right operand.
inline void pack_transposed(const bfloat16* src, int64_t row, int64_t r0, int64_t r1, int64_t cols, Pair* dst,
                            int64_t ld) {
  for (int64_t r = r0; r < r1; ++r) {
    const bfloat16* s = src + r * row;
    for (int64_t p = 0; p < cols / 2; ++p) dst[p * ld + (r - r0)] = pair(s[2 * p].bits, s[2 * p + 1].bits);
    if (cols % 2) dst[(cols / 2) * ld + (r - r0)] = pair(s[cols - 1].bits, 0);
  }
}

#if defined(__x86_64__) || defined(__i386__)

#define MIXGRAD_BF16_DOT_TARGET MIXGRAD_AVX512_TARGET ",avx512bf16"

/// Rows [i, i + MR) of gemm: MR rows by two vectors of 16 columns in
/// registers across the whole sum, the last columns under a mask.
template <tiles::Into Mode, int MR>
[[gnu::always_inline]] inline __attribute__((target(MIXGRAD_BF16_DOT_TARGET))) void gemm_rows(
    int64_t i, int64_t n, int64_t kp, const Pair* a, int64_t a_rs, int64_t a_cs, const Pair* b, int64_t ldb,
    float* c, int64_t ldc) {
  for (int64_t j = 0; j < n; j += 32) {
    const int64_t left = n - j;
    const __mmask16 m0 = left >= 16 ? 0xffff : static_cast<__mmask16>((1u << left) - 1);
    const __mmask16 m1 = left >= 32 ? 0xffff : left <= 16 ? 0 : static_cast<__mmask16>((1u << (left - 16)) - 1);
    __m512 acc[MR][2];
    for (int r = 0; r < MR; ++r) {
      float* cr = c + (i + r) * ldc + j;
      acc[r][0] = Mode == tiles::accumulate ? _mm512_maskz_loadu_ps(m0, cr) : _mm512_setzero_ps();
      acc[r][1] = Mode == tiles::accumulate ? _mm512_maskz_loadu_ps(m1, cr + 16) : _mm512_setzero_ps();
    }
    for (int64_t p = 0; p < kp; ++p) {
      const Pair* bp = b + p * ldb + j;
      const __m512bh b0 = (__m512bh)_mm512_maskz_loadu_epi32(m0, bp);
      const __m512bh b1 = (__m512bh)_mm512_maskz_loadu_epi32(m1, bp + 16);
      for (int r = 0; r < MR; ++r) {
        const __m512bh ar = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[(i + r) * a_rs + p * a_cs]));
        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], ar, b0);
        acc[r][1] = _mm512_dpbf16_ps(acc[r][1], ar, b1);
      }
    }
    for (int r = 0; r < MR; ++r) {
      float* cr = c + (i + r) * ldc + j;
      _mm512_mask_storeu_ps(cr, m0, acc[r][0]);
      _mm512_mask_storeu_ps(cr + 16, m1, acc[r][1]);
    }
  }
}

/// c[i * ldc + j] (+)= sum_p dot(a[i * a_rs + p * a_cs], b[p * ldb + j]) for
/// i < m, j < n, p < kp pairs, dot the two-product sum of vdpbf16ps, in
/// float (with `overwrite`, = instead of +=). Twelve rows at a time, then
/// eight, four and one.
template <tiles::Into Mode>
[[gnu::noinline]] __attribute__((target(MIXGRAD_BF16_DOT_TARGET))) inline void gemm(
    int64_t m, int64_t n, int64_t kp, const Pair* a, int64_t a_rs, int64_t a_cs, const Pair* b, int64_t ldb,
    float* c, int64_t ldc) {
  int64_t i = 0;
  for (; i + 12 <= m; i += 12) gemm_rows<Mode, 12>(i, n, kp, a, a_rs, a_cs, b, ldb, c, ldc);
  for (; i + 8 <= m; i += 8) gemm_rows<Mode, 8>(i, n, kp, a, a_rs, a_cs, b, ldb, c, ldc);
  for (; i + 4 <= m; i += 4) gemm_rows<Mode, 4>(i, n, kp, a, a_rs, a_cs, b, ldb, c, ldc);
  for (; i < m; ++i) gemm_rows<Mode, 1>(i, n, kp, a, a_rs, a_cs, b, ldb, c, ldc);
}

#else

/// Declared only, so that attention's pair branches compile off x86; they
/// are never instantiated there (attention takes them only on x86 with
/// AVX512-BF16), and a use would fail to link.
template <tiles::Into Mode>
void gemm(int64_t m, int64_t n, int64_t kp, const Pair* a, int64_t a_rs, int64_t a_cs, const Pair* b, int64_t ldb,
          float* c, int64_t ldc);

#endif

}  // namespace mixgrad::backend::cpu::bf16_pairs
