// The switch between oneDNN and the built-in CPU kernels, available in every
// build (with or without oneDNN). The CPU backends of matmul, conv, pooling,
// batch_norm and softmax run oneDNN when `enabled()`, and their built-in
// kernels otherwise (and always for float64, or where oneDNN has no kernel for
// a configuration). Tests use the scope to compare the two paths:
//
//   Tensor fast = F::conv2d(x, w);
//   {
//     backend::onednn::FallbackScope fallback;   // built-in kernels only
//     Tensor ref = F::conv2d(x, w);
//   }
#pragma once

namespace mixgrad::backend::onednn {

/// True when mixgrad was built with oneDNN (meson option -Donednn).
bool built();

/// True when the CPU ops use oneDNN now: built() and not switched off.
bool enabled();

/// Switches the oneDNN path on or off for the whole process. Switching on in
/// a build without oneDNN has no effect.
void set_enabled(bool on);

/// Runs the built-in kernels for its lifetime, then restores the previous
/// setting. Results computed inside carry their own backward state, so a
/// gradient computed after the scope closes still matches its forward.
class [[nodiscard]] FallbackScope {
 public:
  FallbackScope() : previous_(enabled()) { set_enabled(false); }
  ~FallbackScope() { set_enabled(previous_); }
  FallbackScope(const FallbackScope&) = delete;
  FallbackScope& operator=(const FallbackScope&) = delete;

 private:
  bool previous_;
};

}  // namespace mixgrad::backend::onednn
