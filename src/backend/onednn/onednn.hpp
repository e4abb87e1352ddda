// When the CPU backend runs oneDNN, available in every build (with or without
// oneDNN). The CPU backends of matmul, conv, pooling and softmax run oneDNN
// (batch_norm never does: backend/cpu/batch_norm.cpp says why) for float32 /
// bfloat16 / float16 work of at least kMinWork, and their built-in kernels
// otherwise: for float64, for configurations oneDNN
// lacks, and for tiny problems, where a oneDNN call (descriptors, memory
// objects, waking the OpenMP team) costs more than the arithmetic. Tests use
// the scopes to compare the two paths on the same inputs:
//
//   backend::onednn::ModeScope always(backend::onednn::Mode::always);
//   Tensor fast = F::conv2d(x, w);               // oneDNN even for tiny shapes
//   {
//     backend::onednn::FallbackScope fallback;   // built-in kernels only
//     Tensor ref = F::conv2d(x, w);
//   }
#pragma once

#include <cstdint>

namespace mixgrad::backend::onednn {

/// Multiply-adds (matmul, conv) or elements (pooling windows, softmax) below which the built-in kernels run in Mode::automatic.
inline constexpr int64_t kMinWork = int64_t{1} << 15;

enum class Mode : uint8_t {
  automatic,  // oneDNN from kMinWork on
  always,     // oneDNN whenever it has a kernel (tests)
  never,      // built-in kernels only
};

/// True when mixgrad was built with oneDNN (meson option -Donednn).
bool built();

/// The process-wide mode (automatic by default; never without oneDNN).
Mode mode();
void set_mode(Mode m);

/// True when oneDNN may run now: built() and the mode is not `never`.
bool enabled();

/// True when an op of `work` multiply-adds or elements runs oneDNN now.
bool use_for(int64_t work);

/// oneDNN primitive descriptors built on the calling thread so far (primitive
/// cache misses); 0 without oneDNN. A training loop stops increasing it after
/// its first step.
int64_t primitives_created();

/// Sets the mode for its lifetime, then restores the previous one. Results
/// carry their own backward state (a max-pool workspace says which path made
/// it), so a gradient computed after the scope closes still matches.
class [[nodiscard]] ModeScope {
 public:
  explicit ModeScope(Mode m) : previous_(mode()) { set_mode(m); }
  ~ModeScope() { set_mode(previous_); }
  ModeScope(const ModeScope&) = delete;
  ModeScope& operator=(const ModeScope&) = delete;

 private:
  Mode previous_;
};

/// Built-in kernels only, for its lifetime.
class [[nodiscard]] FallbackScope : public ModeScope {
 public:
  FallbackScope() : ModeScope(Mode::never) {}
};

}  // namespace mixgrad::backend::onednn
