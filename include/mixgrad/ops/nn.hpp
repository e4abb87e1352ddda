// mixgrad/ops/nn.hpp — the neural-network ops (oneDNN / cuDNN where they apply).
//
//   F::conv2d(x, w, b, {.stride = 2, .padding = 1});
//   F::conv1d(x, w, b, {.padding = 1});                       // x: [N, C, L]
//   F::conv_transpose2d(x, w, b, {.stride = 2, .padding = 1, .output_padding = 1});
//   F::max_pool2d(x, {.kernel_size = 2});
//   F::max_pool1d(seq, {.kernel_size = 3, .stride = 2});      // seq: [N, C, L]
//   F::batch_norm(x, running_mean, running_var, weight, bias, {.training = true});
//   F::prelu(x, weight);                                      // weight: [1] or [C], x: [N, C, ...]
#pragma once

#include "mixgrad/ops/options.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::F {

struct Conv2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
};
/// x: [N, C, H, W], weight: [O, C/groups, KH, KW], bias: [O] or undefined,
/// all of one floating dtype (autocast runs conv2d in low precision).
/// Output [N, O, OH, OW] with OH = (H + 2*padding - dilation*(KH-1) - 1) / stride + 1.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Conv2dOptions& options = {});

struct Conv1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
};
/// x: [N, C, L], weight: [O, C/groups, K], bias: [O] or undefined, all of one
/// floating dtype (autocast runs conv1d in low precision). Output [N, O, OL]
/// with OL = (L + 2*padding - dilation*(K-1) - 1) / stride + 1. Runs as
/// conv2d's kernels on height-1 views (no copy).
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Conv1dOptions& options = {});

struct ConvTranspose2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  /// Extra rows / columns at the bottom / right of the output, to pick one of
  /// the input sizes a strided conv2d maps to the same size; < stride.
  Size2 output_padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
};
/// The adjoint (gradient with respect to its input) of conv2d, as PyTorch's
/// conv_transpose2d: x: [N, C, H, W], weight: [C, O/groups, KH, KW] (the
/// layout of the conv2d it transposes), bias: [O] or undefined. Output
/// [N, O, OH, OW] with OH = (H - 1)*stride - 2*padding + dilation*(KH-1) +
/// output_padding + 1. Runs conv2d's backward-data kernel; its backward runs
/// conv2d's forward (input gradient) and backward-weights (weight gradient).
/// Autocast runs it in low precision.
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                        const ConvTranspose2dOptions& options = {});

struct Pool2dOptions {
  Size2 kernel_size = 2;
  Size2 stride = 0;  // 0: same as kernel_size
  Size2 padding = 0;
};
/// Max over each window of x [N, C, H, W]; padding (at most half the kernel)
/// never wins. The gradient goes to the maximal element of each window.
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& options = {});
/// Average pooling; padded positions are not counted (count_include_pad=false).
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& options = {});
struct Pool1dOptions {
  int64_t kernel_size = 2;
  int64_t stride = 0;  // 0: same as kernel_size
  int64_t padding = 0;
};
/// max_pool2d and avg_pool2d for x [N, C, L] (sequences): windows along L,
/// output [N, C, (L + 2*padding - kernel_size) / stride + 1].
Tensor max_pool1d(const Tensor& x, const Pool1dOptions& options = {});
Tensor avg_pool1d(const Tensor& x, const Pool1dOptions& options = {});
struct Pool3dOptions {
  Size3 kernel_size = 2;
  Size3 stride = 0;  // 0: same as kernel_size
  Size3 padding = 0;  // at most half the kernel
};
/// max_pool2d and avg_pool2d for volumes x [N, C, D, H, W]: windows are
/// boxes, output [N, C, OD, OH, OW] with OD = (D + 2*padding - kernel) /
/// stride + 1 (and so on). A box is pooled as its (H, W) window per depth
/// slice, then along D: the same max, and the same mean over the box's inside
/// positions (padding not counted), by the 2-d kernels. PyTorch's CPU
/// autocast list runs both in float32; its CUDA lists leave them alone.
Tensor max_pool3d(const Tensor& x, const Pool3dOptions& options = {});
Tensor avg_pool3d(const Tensor& x, const Pool3dOptions& options = {});
/// Average over windows rows [floor(i*H/OH), ceil((i+1)*H/OH)) (and the same
/// for columns), giving [N, C, OH, OW] for any input with H, W >= 1 (an
/// empty image has no average: ShapeError).
Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size);

struct BatchNormOptions {
  bool training = false;  // batch statistics (and running-stat update) vs running stats
  double momentum = 0.1;  // running = (1 - momentum) * running + momentum * batch
  double eps = 1e-5;
};
/// Over [N, C, ...]: per-channel normalisation. In training, running_mean and
/// running_var (float32, may be undefined) are updated in place with the
/// unbiased batch variance. weight / bias may be undefined. Statistics are
/// computed in float32 whatever the input dtype (float64 for float64), so
/// float16 / bfloat16 input with float32 weight, bias and running statistics
/// works; the output has the input's dtype. Evaluation mode needs the running
/// statistics; training needs more than one value per channel. momentum
/// must lie in [0, 1] and eps be finite and >= 0 (ValueError otherwise).
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), const BatchNormOptions& options = {});

/// Normalises over the trailing dims given by normalized_shape:
/// (x - mean) / sqrt(var + eps) * weight + bias, with the biased variance.
/// weight and bias (shape normalized_shape, may be undefined) may have a
/// different floating dtype than x; statistics are computed in float32
/// (float64 for float64 x) and the output has x's dtype.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);

/// Group normalisation (Wu & He, 2018) of x [N, C, *]: the C channels are
/// split into num_groups groups of C / num_groups consecutive channels, and
/// each (sample, group) is normalised over its channels and all positions,
/// (x - mean) / sqrt(var + eps) with the biased variance, then scaled by
/// weight [C] and shifted by bias [C] per channel (either may be undefined).
/// Statistics are computed in float32 (float64 for float64 x); weight and
/// bias may have another floating dtype than x, the output has x's dtype.
/// ShapeError unless x has >= 2 dims and C is a multiple of num_groups >= 1.
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  double eps = 1e-5);

/// Instance normalisation (Ulyanov et al., 2016) of x [N, C, *]: each
/// (sample, channel) normalised over its positions, then the per-channel
/// affine; group_norm with one channel per group, without running statistics
/// (PyTorch's default track_running_stats=false).
Tensor instance_norm(const Tensor& x, const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                     double eps = 1e-5);

/// Zeroes elements with probability p and scales the rest by 1/(1-p) when
/// training; identity (x itself) otherwise or when p == 0. p outside [0, 1)
/// throws mixgrad::Error. The mask comes from the global seeded generator
/// (mg::manual_seed), the same on any thread count; the backward reuses it.
Tensor dropout(const Tensor& x, double p, bool training = true);

/// exp(x) / sum(exp(x)) along `axis`, computed stably (max subtracted) in
/// float for 16-bit input; autocast runs it in float32.
Tensor softmax(const Tensor& x, int axis = -1);
/// log(softmax(x)) along `axis`, without forming softmax(x).
Tensor log_softmax(const Tensor& x, int axis = -1);

/// x where x > 0, weight * x elsewhere (PyTorch's prelu): weight holds one
/// slope (0-d or [1]) or one per channel ([C], channel dim 1 of x; x needs
/// at least 2 dims then). x and weight share a floating dtype (autocast: low
/// precision, as PyTorch's lists). Composed of F:: ops (where, mul), so
/// twice differentiable in both. ShapeError / DTypeError / DeviceError
/// naming the op, x and weight otherwise.
Tensor prelu(const Tensor& x, const Tensor& weight);

}  // namespace mixgrad::F
