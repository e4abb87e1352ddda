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
