// mixgrad/ops/fp8.hpp — FP8 values in wider dtypes: the rounding of the 8-bit
// formats of NVIDIA's Ada / Hopper tensor cores, emulated on any device.
//
//   Tensor r = F::fp8_round(x, Fp8Format::e4m3);         // x's dtype, every value an E4M3 value
//   Tensor q = F::fp8_quantize(x, scale, Fp8Format::e5m2); // float32: round(x * scale)
//
// E4M3 ("fn"): 3 mantissa bits, largest finite 448, subnormals down to 2^-9,
// no infinity. E5M2: 2 mantissa bits, largest finite 57344, subnormals down
// to 2^-16, infinities. Rounding is to nearest, ties to even; finite values
// beyond the largest saturate to it; NaN stays NaN, an infinity stays one in
// E5M2 and becomes NaN in E4M3. The results are stored in a wider floating
// dtype, which holds every FP8 value exactly: no FP8 dtype exists, and on
// the CPU this is emulation (numerics only, no speedup). docs/fp8.md.
//
// Gradients are straight-through (as in Transformer Engine and torchao): the
// rounding counts as the identity, so fp8_round passes g and fp8_quantize
// g * scale (the scale itself gets none). Not differentiable twice.
#pragma once

#include "mixgrad/tensor.hpp"

namespace mixgrad {

/// The two FP8 formats.
enum class Fp8Format { e4m3, e5m2 };

/// The largest finite value of `f`: 448 (E4M3) or 57344 (E5M2).
constexpr double fp8_max(Fp8Format f) { return f == Fp8Format::e4m3 ? 448.0 : 57344.0; }

}  // namespace mixgrad

namespace mixgrad::F {

/// x rounded to the nearest value of `format`, in x's dtype (any floating
/// dtype, any device). DTypeError naming the op for a non-floating x.
Tensor fp8_round(const Tensor& x, Fp8Format format);

/// round(x * scale) in `format`, as float32: the scaled cast of FP8 training.
/// `scale` is a one-element float32 tensor on x's device (read there, never
/// on the host). DTypeError / ShapeError / DeviceError naming the op.
Tensor fp8_quantize(const Tensor& x, const Tensor& scale, Fp8Format format);

}  // namespace mixgrad::F
