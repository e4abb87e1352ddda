// mixgrad/nn/conv.hpp — 2-d convolution over [N, C, H, W] inputs.
//
//   mg::nn::Conv2d conv(1, 32, 3, {.padding = 1});             // 3x3, same size out
//   mg::nn::Conv2d down(64, 128, 3, {.stride = 2, .padding = 1, .bias = false});
//   mg::nn::Conv2d dw(64, 64, {3, 3}, {.padding = 1, .groups = 64});   // depthwise
//   auto y = conv(x);                                          // [N, 32, H, W]
//
// weight: [out_channels, in_channels / groups, kh, kw], bias: [out_channels];
// initialised as PyTorch does (kaiming_uniform with a = sqrt(5), bias
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = in_channels / groups * kh * kw).
#pragma once

#include "mixgrad/nn/module.hpp"
#include "mixgrad/ops/options.hpp"

namespace mixgrad::nn {

struct Conv2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

class Conv2d : public Module {
 public:
  /// Throws ValueError for non-positive channels, kernel, stride, dilation
  /// or groups, negative padding, or channels not divisible by groups.
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, const Conv2dOptions& options = {});

  /// F::conv2d; ShapeError unless x is [N, in_channels, H, W].
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

}  // namespace mixgrad::nn
