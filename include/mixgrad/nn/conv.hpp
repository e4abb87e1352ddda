// mixgrad/nn/conv.hpp — convolutions: Conv2d over [N, C, H, W] inputs,
// Conv1d over [N, C, L], ConvTranspose2d (the adjoint of Conv2d, for
// upsampling decoders) over [N, C, H, W].
//
//   mg::nn::Conv2d conv(1, 32, 3, {.padding = 1});             // 3x3, same size out
//   mg::nn::Conv2d down(64, 128, 3, {.stride = 2, .padding = 1, .bias = false});
//   mg::nn::Conv2d dw(64, 64, {3, 3}, {.padding = 1, .groups = 64});   // depthwise
//   auto y = conv(x);                                          // [N, 32, H, W]
//   mg::nn::Conv1d c1(16, 32, 5, {.padding = 2});              // [N, 16, L] -> [N, 32, L]
//   mg::nn::ConvTranspose2d up(64, 32, 4, {.stride = 2, .padding = 1});  // H, W doubled
//   mg::nn::Conv2d ring(8, 8, 3, {.padding = 1, .padding_mode = mg::nn::PaddingMode::circular});
//
// weight: [out_channels, in_channels / groups, kh, kw], bias: [out_channels];
// initialised as PyTorch does (kaiming_uniform with a = sqrt(5), bias
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = in_channels / groups * kh * kw).
// Conv1d's weight is [out_channels, in_channels / groups, k]; ConvTranspose2d's
// is [in_channels, out_channels / groups, kh, kw] as in PyTorch, whose fan_in
// (dim 1 times the kernel) it shares.
//
// padding_mode (Conv2d, Conv1d), as PyTorch's: zeros pads inside the
// convolution; reflect, replicate and circular pad x first with F::pad in
// that mode (its limits apply: reflect needs the padding smaller than the
// input's extent, ShapeError at forward), then convolve without padding.
// ConvTranspose2d has zeros only, as in PyTorch.
#pragma once

#include "mixgrad/nn/module.hpp"
#include "mixgrad/ops/options.hpp"

namespace mixgrad::nn {

/// What a convolution's padding holds (PyTorch's padding_mode strings).
enum class PaddingMode : uint8_t { zeros, reflect, replicate, circular };

struct Conv2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;
  PaddingMode padding_mode = PaddingMode::zeros;
};

class Conv2d : public Module {
 public:
  /// Throws ValueError for non-positive channels, kernel, stride, dilation
  /// or groups, negative padding, or channels not divisible by groups.
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, const Conv2dOptions& options = {});

  /// F::conv2d (after F::pad for a padding_mode other than zeros);
  /// ShapeError unless x is [N, in_channels, H, W].
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

  const Tensor& weight() const { return weight_; }
  /// Undefined when built with {.bias = false}.
  const Tensor& bias() const { return bias_; }
  const Conv2dOptions& options() const { return options_; }

 private:
  int64_t in_, out_;
  Size2 kernel_;
  Conv2dOptions options_;
  Tensor weight_, bias_;
};

struct Conv1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
  PaddingMode padding_mode = PaddingMode::zeros;
};

class Conv1d : public Module {
 public:
  /// Throws ValueError for non-positive channels, kernel, stride, dilation
  /// or groups, negative padding, or channels not divisible by groups.
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, const Conv1dOptions& options = {});

  /// F::conv1d (after F::pad for a padding_mode other than zeros);
  /// ShapeError unless x is [N, in_channels, L].
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

  const Tensor& weight() const { return weight_; }
  /// Undefined when built with {.bias = false}.
  const Tensor& bias() const { return bias_; }
  const Conv1dOptions& options() const { return options_; }

 private:
  int64_t in_, out_, kernel_;
  Conv1dOptions options_;
  Tensor weight_, bias_;
};

struct ConvTranspose2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 output_padding = 0;  // < stride
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

class ConvTranspose2d : public Module {
 public:
  /// Throws ValueError for non-positive channels, kernel, stride, dilation
  /// or groups, negative padding, output_padding outside [0, stride), or
  /// channels not divisible by groups.
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size,
                  const ConvTranspose2dOptions& options = {});

  /// F::conv_transpose2d; ShapeError unless x is [N, in_channels, H, W].
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

  const Tensor& weight() const { return weight_; }
  /// Undefined when built with {.bias = false}.
  const Tensor& bias() const { return bias_; }
  const ConvTranspose2dOptions& options() const { return options_; }

 private:
  int64_t in_, out_;
  Size2 kernel_;
  ConvTranspose2dOptions options_;
  Tensor weight_, bias_;
};

}  // namespace mixgrad::nn
