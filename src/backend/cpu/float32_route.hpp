// The float32 route of 16-bit work on the CPU: matrix products and
// convolutions of 16-bit tensors where the CPU has no 16-bit math, and of
// operands autocast left mixed (float32 weights beside 16-bit activations).
// Operands are widened, the kernel writes float32, the result is rounded
// once into its own dtype.
//
//   cpu::into_float32(out, [&](const Tensor& out32) { kernel(cpu::widened(a), cpu::widened(b), out32); });
#pragma once

#include "backend/copy.hpp"
#include "mixgrad/tensor.hpp"

#if MIXGRAD_WITH_ONEDNN
#include "backend/onednn/common.hpp"
#endif

namespace mixgrad::backend::cpu {

/// t itself when it is float32 (in any layout), else a float32 conversion
/// (keeping a transposed layout where oneDNN is built).
inline Tensor widened(const Tensor& t) {
  if (t.dtype() == DType::float32) return t;
#if MIXGRAD_WITH_ONEDNN
  return onednn::to_float32(t);
#else
  Tensor out = empty(t.shape(), DType::float32, t.device());
  copy(t, out);
  return out;
#endif
}

/// run(out) when out is float32, else run(scratch) on a float32 scratch of
/// out's shape, then the scratch rounded into out.
template <class Run>
void into_float32(const Tensor& out, Run&& run) {
  if (out.dtype() == DType::float32) return run(out);
  Tensor out32 = empty(out.shape(), DType::float32, out.device());
  run(out32);
  copy_kernel(out32, out);
}

}  // namespace mixgrad::backend::cpu
