// mixgrad/ops/conv3d.hpp — the volume convolutions, as PyTorch's F.conv3d
// and F.conv_transpose3d.
//
//   F::conv3d(x, w, b, {.stride = 2, .padding = 1});   // x: [N, C, D, H, W]
//   F::conv_transpose3d(x, w, b, {.stride = 2});        // w: [C, O/groups, KD, KH, KW]
#pragma once

#include "mixgrad/ops/options.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::F {

struct Conv3dOptions {
  Size3 stride = 1;
  Size3 padding = 0;
  Size3 dilation = 1;
  int64_t groups = 1;
};
/// x: [N, C, D, H, W] (or [C, D, H, W]), weight: [O, C/groups, KD, KH, KW],
/// bias: [O] or undefined. Output [N, O, OD, OH, OW] with OD = (D +
/// 2*padding - dilation*(KD-1) - 1) / stride + 1 (and so on). Runs as KD
/// conv2d calls, one per depth tap of the kernel, on the [N*OD, C, H, W]
/// slices that tap reads, summed: differentiable twice through them. Low
/// precision under autocast (PyTorch's CPU and CUDA lists).
Tensor conv3d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Conv3dOptions& options = {});

struct ConvTranspose3dOptions {
  Size3 stride = 1;
  Size3 padding = 0;
  Size3 output_padding = 0;  // < stride (or < dilation), per dim
  Size3 dilation = 1;
  int64_t groups = 1;
};
/// The adjoint of conv3d, as PyTorch's conv_transpose3d: x [N, C, D, H, W]
/// (or [C, D, H, W]), weight [C, O/groups, KD, KH, KW], bias [O] or
/// undefined. Output extents (D - 1)*stride - 2*padding + dilation*(KD-1) +
/// output_padding + 1 (and so on). Runs as KD conv_transpose2d calls on the
/// [N*D, C, H, W] slices, each added (scatter_add) at the output depths its
/// kernel tap reaches: differentiable twice through them. Low precision
/// under autocast (PyTorch's CPU and CUDA lists).
Tensor conv_transpose3d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                        const ConvTranspose3dOptions& options = {});

}  // namespace mixgrad::F
