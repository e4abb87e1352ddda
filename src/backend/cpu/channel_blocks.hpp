// Conversions of 16-bit activations between plain NCHW and the layout with
// channels in blocks of 16 innermost ([N, C/16, H, W, 16], oneDNN's
// aBcd16b), which the oneDNN convolutions run on. oneDNN 2.6's own reorder
// for bfloat16 took about twice as long as for float32 (half the bytes); these
// transpose 16 x 16 tiles in AVX-512 registers. They run only where
// available() (AVX-512, C a multiple of 16); otherwise oneDNN's reorder does
// the work.
//
//   if (cpu::channel_blocks::available(c)) cpu::channel_blocks::to_blocked(src, dst, n, c, h * w);
#pragma once

#include <cstdint>

namespace mixgrad::backend::cpu::channel_blocks {

/// True when the transposes run on this CPU for c channels.
bool available(int64_t c);

/// Where a 16-bit convolution is computed in float32: src [n, c, hw] of
/// 16-bit T (bfloat16 or half) -> dst [n, c / block, hw, block] float32, and
/// back, rounding to nearest even. One pass each way, on every CPU; c must be
/// a multiple of block (8 or 16). The plain float32 copy a conversion
/// followed by oneDNN's reorder would need is never made, and oneDNN 2.6's
/// own converting reorder for CPUs without AVX-512 is its slow generic one.
template <class T>
void widen_to_blocks(const T* src, float* dst, int64_t n, int64_t c, int64_t hw, int block);
template <class T>
void narrow_from_blocks(const float* src, T* dst, int64_t n, int64_t c, int64_t hw, int block);

/// Turns the transposes off for its lifetime, so oneDNN's reorders run
/// (tests compare the two). Process-wide: for tests only.
class [[nodiscard]] OffScope {
 public:
  OffScope();
  ~OffScope();
  OffScope(const OffScope&) = delete;
  OffScope& operator=(const OffScope&) = delete;

 private:
  bool previous_;
};

/// src [n, c, hw] -> dst [n, c / 16, hw, 16], 16-bit elements.
void to_blocked(const uint16_t* src, uint16_t* dst, int64_t n, int64_t c, int64_t hw);

/// src [n, c / 16, hw, 16] -> dst [n, c, hw], 16-bit elements.
void from_blocked(const uint16_t* src, uint16_t* dst, int64_t n, int64_t c, int64_t hw);

}  // namespace mixgrad::backend::cpu::channel_blocks
