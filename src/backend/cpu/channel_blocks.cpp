// 16 x 16 transposes of 16-bit values in 256-bit registers: four rounds of
// interleaves (16-, 32-, 64-bit, then 128-bit halves), 64 shuffles per 256
// values. A block of 16 channels of one image is 16 rows of hw values in
// the plain layout and hw rows of 16 values in the blocked one; columns past
// the last full tile go one by one. widen_to_blocks / narrow_from_blocks
// convert 16-bit plain data to and from float32 blocks of 8 or 16 channels
// in the same pass, through a small buffer of converted rows.
#include "backend/cpu/channel_blocks.hpp"

#include <immintrin.h>

#include <algorithm>
#include <atomic>

#include "core/simd.hpp"
#include "kernels/loops.hpp"
#include "mixgrad/half.hpp"

namespace mixgrad::backend::cpu::channel_blocks {

namespace {

#if defined(__x86_64__) || defined(__i386__)

#define MIXGRAD_TILE_TARGET __attribute__((target(MIXGRAD_AVX512_TARGET)))

// r[i] holds row i (16 values); afterwards r[j] holds column j.
MIXGRAD_TILE_TARGET inline void transpose16(__m256i r[16]) {
  __m256i t[16], u[16];
  for (int k = 0; k < 8; ++k) {
    t[2 * k] = _mm256_unpacklo_epi16(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm256_unpackhi_epi16(r[2 * k], r[2 * k + 1]);
  }
  // u[4m + j]: columns 2j, 2j + 1 (and 8 + 2j, 9 + 2j in the upper half) of rows 4m .. 4m + 3.
  for (int m = 0; m < 4; ++m) {
    u[4 * m + 0] = _mm256_unpacklo_epi32(t[4 * m], t[4 * m + 2]);
    u[4 * m + 1] = _mm256_unpackhi_epi32(t[4 * m], t[4 * m + 2]);
    u[4 * m + 2] = _mm256_unpacklo_epi32(t[4 * m + 1], t[4 * m + 3]);
    u[4 * m + 3] = _mm256_unpackhi_epi32(t[4 * m + 1], t[4 * m + 3]);
  }
  // w[g][c]: column c of rows 8g .. 8g + 7 (lower half), column c + 8 (upper half).
  __m256i w[2][8];
  for (int g = 0; g < 2; ++g)
    for (int j = 0; j < 4; ++j) {
      w[g][2 * j] = _mm256_unpacklo_epi64(u[8 * g + j], u[8 * g + 4 + j]);
      w[g][2 * j + 1] = _mm256_unpackhi_epi64(u[8 * g + j], u[8 * g + 4 + j]);
    }
  for (int c = 0; c < 8; ++c) {
    r[c] = _mm256_permute2x128_si256(w[0][c], w[1][c], 0x20);
    r[c + 8] = _mm256_permute2x128_si256(w[0][c], w[1][c], 0x31);
  }
}

// One block of 16 channels: rows `plain + j * hw` <-> `blocked` [hw][16].
MIXGRAD_TILE_TARGET void block_to_blocked(const uint16_t* plain, uint16_t* blocked, int64_t hw) {
  int64_t p = 0;
  for (; p + 16 <= hw; p += 16) {
    __m256i r[16];
    for (int j = 0; j < 16; ++j) r[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(plain + j * hw + p));
    transpose16(r);
    for (int i = 0; i < 16; ++i) _mm256_storeu_si256(reinterpret_cast<__m256i*>(blocked + (p + i) * 16), r[i]);
  }
  for (; p < hw; ++p)
    for (int j = 0; j < 16; ++j) blocked[p * 16 + j] = plain[j * hw + p];
}

MIXGRAD_TILE_TARGET void block_from_blocked(const uint16_t* blocked, uint16_t* plain, int64_t hw) {
  int64_t p = 0;
  for (; p + 16 <= hw; p += 16) {
    __m256i r[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blocked + (p + i) * 16));
    transpose16(r);
    for (int j = 0; j < 16; ++j) _mm256_storeu_si256(reinterpret_cast<__m256i*>(plain + j * hw + p), r[j]);
  }
  for (; p < hw; ++p)
    for (int j = 0; j < 16; ++j) plain[j * hw + p] = blocked[p * 16 + j];
}

#endif

// Blocks (image, `width` channels) split across threads; `block(at)` gets
// the offset of one, the same in both layouts.
template <class Block>
void for_blocks(int64_t n, int64_t c, int64_t hw, int width, Block&& block) {
  const int64_t blocks = n * (c / width);
  const int64_t grain = std::max<int64_t>(1, kernels::kParallelGrain / std::max<int64_t>(1, width * hw));
  kernels::parallel_for(blocks, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) block(b * width * hw);
  });
}

std::atomic<bool>& switched_on() {
  static std::atomic<bool> on{true};
  return on;
}

// Spans of one (image, channel block) handled at a time: `kSpan` positions
// of `block` channels, converted through an L1-resident row buffer.
constexpr int64_t kSpan = 256;

template <class T>
void widen_block(const T* src, float* dst, int64_t hw, int block) {
  alignas(64) float rows[16][kSpan];
  for (int64_t p0 = 0; p0 < hw; p0 += kSpan) {
    const int64_t len = std::min(kSpan, hw - p0);
    for (int k = 0; k < block; ++k) convert(src + k * hw + p0, rows[k], len);
    float* out = dst + p0 * block;
    for (int64_t p = 0; p < len; ++p)
      for (int k = 0; k < block; ++k) out[p * block + k] = rows[k][p];
  }
}

template <class T>
void narrow_block(const float* src, T* dst, int64_t hw, int block) {
  alignas(64) float rows[16][kSpan];
  for (int64_t p0 = 0; p0 < hw; p0 += kSpan) {
    const int64_t len = std::min(kSpan, hw - p0);
    const float* in = src + p0 * block;
    for (int64_t p = 0; p < len; ++p)
      for (int k = 0; k < block; ++k) rows[k][p] = in[p * block + k];
    for (int k = 0; k < block; ++k) convert(rows[k], dst + k * hw + p0, len);
  }
}

}  // namespace

OffScope::OffScope() : previous_(switched_on().exchange(false)) {}
OffScope::~OffScope() { switched_on().store(previous_); }

template <class T>
void widen_to_blocks(const T* src, float* dst, int64_t n, int64_t c, int64_t hw, int block) {
  for_blocks(n, c, hw, block, [&](int64_t off) { widen_block(src + off, dst + off, hw, block); });
}

template <class T>
void narrow_from_blocks(const float* src, T* dst, int64_t n, int64_t c, int64_t hw, int block) {
  for_blocks(n, c, hw, block, [&](int64_t off) { narrow_block(src + off, dst + off, hw, block); });
}

template void widen_to_blocks<bfloat16>(const bfloat16*, float*, int64_t, int64_t, int64_t, int);
template void widen_to_blocks<half>(const half*, float*, int64_t, int64_t, int64_t, int);
template void narrow_from_blocks<bfloat16>(const float*, bfloat16*, int64_t, int64_t, int64_t, int);
template void narrow_from_blocks<half>(const float*, half*, int64_t, int64_t, int64_t, int);

bool available(int64_t c) {
#if defined(__x86_64__) || defined(__i386__)
  return c > 0 && c % 16 == 0 && simd::level() == simd::Level::avx512 && switched_on().load(std::memory_order_relaxed);
#else
  (void)c;
  return false;
#endif
}

// Block b of 16 channels starts at b * 16 * hw in both layouts.
void to_blocked(const uint16_t* src, uint16_t* dst, int64_t n, int64_t c, int64_t hw) {
#if defined(__x86_64__) || defined(__i386__)
  for_blocks(n, c, hw, 16, [&](int64_t at) { block_to_blocked(src + at, dst + at, hw); });
#else
  (void)src, (void)dst, (void)n, (void)c, (void)hw;
#endif
}

void from_blocked(const uint16_t* src, uint16_t* dst, int64_t n, int64_t c, int64_t hw) {
#if defined(__x86_64__) || defined(__i386__)
  for_blocks(n, c, hw, 16, [&](int64_t at) { block_from_blocked(src + at, dst + at, hw); });
#else
  (void)src, (void)dst, (void)n, (void)c, (void)hw;
#endif
}

}  // namespace mixgrad::backend::cpu::channel_blocks
