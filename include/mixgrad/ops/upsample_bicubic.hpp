// mixgrad/ops/upsample_bicubic.hpp — bicubic resampling, as PyTorch's
// F.interpolate(mode="bicubic") (aten's upsample_bicubic2d).
//
//   F::upsample_bicubic2d(x, {.size = {64, 64}});
//   F::upsample_bicubic2d(x, {.scale_factor = 2.0, .align_corners = true});
#pragma once

#include "mixgrad/ops/resize.hpp"

namespace mixgrad::F {

struct UpsampleBicubic2dOptions {
  Size2 size = 0;           // output (H, W); give either size or scale_factor
  Scale2 scale_factor = 0;  // output extent floor(in * scale); the kernel samples at 1 / scale
  bool align_corners = false;
};

/// Resamples x [N, C, H, W] to [N, C, OH, OW] with Keys' cubic
/// convolution (A = -0.75, PyTorch's), separably along W then H: output o
/// reads the 4 inputs around source coordinate (o + 0.5) * scale - 0.5
/// (scale = H / OH, or 1 / scale_factor when given), or o * (H - 1) / (OH -
/// 1) with align_corners, the taps clamped to the image. Values may
/// overshoot the input's range, as PyTorch's. Linear in x, so
/// differentiable twice. Exactly one of size and scale_factor (ValueError
/// otherwise); floating x (DTypeError). Under autocast float32 on the CPU,
/// as upsample_bilinear, the input's dtype on CUDA.
Tensor upsample_bicubic2d(const Tensor& x, const UpsampleBicubic2dOptions& options);

}  // namespace mixgrad::F
