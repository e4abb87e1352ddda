// Device side of FP8 emulation (mixgrad/ops/fp8.hpp): the scaled, saturating
// cast to an FP8 format, written back as the nearest FP8 value in a wider
// dtype (float32, bfloat16, float16 or float64 hold every FP8 value exactly).
// The scale is a one-element float32 tensor read where it lives, so the
// delayed-scaling recipe (amp::Fp8Scaler) never reads it on the host.
//
//   backend::fp8_quantize(x, out, scale, kernels::kE4M3);    // out = round(x * scale)
//   backend::fp8_quantize(x, out, Tensor(), kernels::kE5M2); // out = round(x)
#pragma once

#include "backend/copy.hpp"
#include "backend/dispatch.hpp"
#include "kernels/fp8.hpp"

namespace mixgrad::backend {

/// The kernel of fp8_quantize below, which checks its arguments first.
MIXGRAD_STUB(fp8_quantize_kernel, 1,
             void(const Tensor& src, const Tensor& dst, const Tensor& scale,
                  const kernels::Fp8Params& format));  // on dst's device

/// dst = kernels::fp8_round(src * scale, format) elementwise: src and dst
/// floating, of one shape and device, any strides; the product formed in
/// float (double where src or dst is float64). scale: undefined (1) or a
/// one-element float32 tensor on dst's device (the caller checks it).
inline void fp8_quantize(const Tensor& src, const Tensor& dst, const Tensor& scale, const kernels::Fp8Params& format) {
  if (dst.shape() != src.shape() || dst.device() != src.device()) [[unlikely]]
    throw_mismatch("fp8_quantize", dst, src);
  fp8_quantize_kernel(src, dst, scale, format);
}

/// codes (uint8) = fp8_encode(fp8_round(src * scale)): FP8 bytes, the
/// operands of an FP8 GEMM. src floating, codes uint8 of src's shape, both
/// contiguous, one device; scale as fp8_quantize's.
MIXGRAD_STUB(fp8_encode, 1,
             void(const Tensor& src, const Tensor& codes, const Tensor& scale,
                  const kernels::Fp8Params& format));  // on codes' device
/// dst (floating) = the values of the uint8 codes; both contiguous.
MIXGRAD_STUB(fp8_decode, 1,
             void(const Tensor& codes, const Tensor& dst, const kernels::Fp8Params& format));  // on dst's device

/// The operands of an FP8 GEMM: row-major [rows, k] uint8 codes of `format`
/// and the one-element float32 inverse of the scale they were encoded with.
struct Fp8Operand {
  const Tensor& codes;
  const Tensor& scale_inv;
  kernels::Fp8Params format;
};

/// out [m, n] (float32 or bfloat16, contiguous) = (a · b^T) * a.scale_inv *
/// b.scale_inv, float32 accumulation. CPU: decodes and runs backend::matmul
/// (the reference). CUDA: cuBLASLt's FP8 GEMM (compute capability 8.9+, k
/// and both row counts multiples of 16, not both E5M2); compiled, not yet
/// run on a GPU (docs/cuda.md).
MIXGRAD_STUB(fp8_gemm, 2, void(const Fp8Operand& a, const Fp8Operand& b, const Tensor& out));  // on out's device

namespace cuda {
/// Whether CUDA device `device` runs fp8_gemm in hardware (compute
/// capability 8.9 or newer: Ada, Hopper and later). False in builds without
/// CUDA.
bool fp8_gemm_available(int device);
}  // namespace cuda

}  // namespace mixgrad::backend
