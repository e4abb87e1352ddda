#include "mixgrad/nn/conv.hpp"

#include "core/sizes.hpp"
#include "mixgrad/ops/nn.hpp"
#include "nn/default_init.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::nn {

namespace {
std::string pair_str(Size2 s) { return "(" + std::to_string(s.h) + ", " + std::to_string(s.w) + ")"; }
}  // namespace

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, const Conv2dOptions& options)
    : in_(in_channels), out_(out_channels), kernel_(kernel_size), options_(options) {
  const auto& o = options_;
  auto bad = [&](const std::string& what) {
    throw ValueError("Conv2d(" + std::to_string(in_) + ", " + std::to_string(out_) + ", kernel_size=" +
                     pair_str(kernel_) + "): " + what);
  };
  if (in_ < 1 || out_ < 1) bad("channels must be >= 1");
  if (kernel_.h < 1 || kernel_.w < 1) bad("kernel_size must be >= 1");
  if (o.stride.h < 1 || o.stride.w < 1) bad("stride must be >= 1, got " + pair_str(o.stride));
  if (o.dilation.h < 1 || o.dilation.w < 1) bad("dilation must be >= 1, got " + pair_str(o.dilation));
  if (o.padding.h < 0 || o.padding.w < 0) bad("padding must be >= 0, got " + pair_str(o.padding));
  if (o.groups < 1 || in_ % o.groups != 0 || out_ % o.groups != 0)
    bad("groups = " + std::to_string(o.groups) + " must divide both channel counts");
  sizes::nbytes(Shape{out_, in_ / o.groups, kernel_.h, kernel_.w}, DType::float32, "Conv2d");
  weight_ = register_parameter("weight", empty({out_, in_ / o.groups, kernel_.h, kernel_.w}));
  if (o.bias) bias_ = register_parameter("bias", empty({out_}));
  detail::reset_weight_and_bias(weight_, bias_);
}

Tensor Conv2d::forward(const Tensor& x) {
  ops::check_defined("Conv2d", {&x});
  if (x.ndim() != 4 || x.shape()[1] != in_)
    throw ShapeError(describe() + ": expected input [N, " + std::to_string(in_) + ", H, W], got " + ops::describe(x));
  return F::conv2d(x, weight_, bias_,
                   {.stride = options_.stride, .padding = options_.padding, .dilation = options_.dilation,
                    .groups = options_.groups});
}

std::string Conv2d::describe() const {
  std::string s = "Conv2d(" + std::to_string(in_) + ", " + std::to_string(out_) + ", kernel_size=" + pair_str(kernel_) +
                  ", stride=" + pair_str(options_.stride);
  if (options_.padding != Size2(0)) s += ", padding=" + pair_str(options_.padding);
  if (options_.dilation != Size2(1)) s += ", dilation=" + pair_str(options_.dilation);
  if (options_.groups != 1) s += ", groups=" + std::to_string(options_.groups);
  if (!bias_.defined()) s += ", bias=false";
  return s + ")";
}

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, const Conv1dOptions& options)
    : in_(in_channels), out_(out_channels), kernel_(kernel_size), options_(options) {
  const auto& o = options_;
  auto bad = [&](const std::string& what) {
    throw ValueError("Conv1d(" + std::to_string(in_) + ", " + std::to_string(out_) +
                     ", kernel_size=" + std::to_string(kernel_) + "): " + what);
  };
  if (in_ < 1 || out_ < 1) bad("channels must be >= 1");
  if (kernel_ < 1) bad("kernel_size must be >= 1");
  if (o.stride < 1) bad("stride must be >= 1, got " + std::to_string(o.stride));
  if (o.dilation < 1) bad("dilation must be >= 1, got " + std::to_string(o.dilation));
  if (o.padding < 0) bad("padding must be >= 0, got " + std::to_string(o.padding));
  if (o.groups < 1 || in_ % o.groups != 0 || out_ % o.groups != 0)
    bad("groups = " + std::to_string(o.groups) + " must divide both channel counts");
  sizes::nbytes(Shape{out_, in_ / o.groups, kernel_}, DType::float32, "Conv1d");
  weight_ = register_parameter("weight", empty({out_, in_ / o.groups, kernel_}));
  if (o.bias) bias_ = register_parameter("bias", empty({out_}));
  detail::reset_weight_and_bias(weight_, bias_);
}

Tensor Conv1d::forward(const Tensor& x) {
  ops::check_defined("Conv1d", {&x});
  if (x.ndim() != 3 || x.shape()[1] != in_)
    throw ShapeError(describe() + ": expected input [N, " + std::to_string(in_) + ", L], got " + ops::describe(x));
  return F::conv1d(x, weight_, bias_,
                   {.stride = options_.stride, .padding = options_.padding, .dilation = options_.dilation,
                    .groups = options_.groups});
}

std::string Conv1d::describe() const {
  std::string s = "Conv1d(" + std::to_string(in_) + ", " + std::to_string(out_) +
                  ", kernel_size=" + std::to_string(kernel_) + ", stride=" + std::to_string(options_.stride);
  if (options_.padding != 0) s += ", padding=" + std::to_string(options_.padding);
  if (options_.dilation != 1) s += ", dilation=" + std::to_string(options_.dilation);
  if (options_.groups != 1) s += ", groups=" + std::to_string(options_.groups);
  if (!bias_.defined()) s += ", bias=false";
  return s + ")";
}

ConvTranspose2d::ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size,
                                 const ConvTranspose2dOptions& options)
    : in_(in_channels), out_(out_channels), kernel_(kernel_size), options_(options) {
  const auto& o = options_;
  auto bad = [&](const std::string& what) {
    throw ValueError("ConvTranspose2d(" + std::to_string(in_) + ", " + std::to_string(out_) + ", kernel_size=" +
                     pair_str(kernel_) + "): " + what);
  };
  if (in_ < 1 || out_ < 1) bad("channels must be >= 1");
  if (kernel_.h < 1 || kernel_.w < 1) bad("kernel_size must be >= 1");
  if (o.stride.h < 1 || o.stride.w < 1) bad("stride must be >= 1, got " + pair_str(o.stride));
  if (o.dilation.h < 1 || o.dilation.w < 1) bad("dilation must be >= 1, got " + pair_str(o.dilation));
  if (o.padding.h < 0 || o.padding.w < 0) bad("padding must be >= 0, got " + pair_str(o.padding));
  if (o.output_padding.h < 0 || o.output_padding.w < 0 || o.output_padding.h >= o.stride.h ||
      o.output_padding.w >= o.stride.w)
    bad("output_padding " + pair_str(o.output_padding) + " must lie in [0, stride " + pair_str(o.stride) + ")");
  if (o.groups < 1 || in_ % o.groups != 0 || out_ % o.groups != 0)
    bad("groups = " + std::to_string(o.groups) + " must divide both channel counts");
  sizes::nbytes(Shape{in_, out_ / o.groups, kernel_.h, kernel_.w}, DType::float32, "ConvTranspose2d");
  weight_ = register_parameter("weight", empty({in_, out_ / o.groups, kernel_.h, kernel_.w}));
  if (o.bias) bias_ = register_parameter("bias", empty({out_}));
  detail::reset_weight_and_bias(weight_, bias_);
}

Tensor ConvTranspose2d::forward(const Tensor& x) {
  ops::check_defined("ConvTranspose2d", {&x});
  if (x.ndim() != 4 || x.shape()[1] != in_)
    throw ShapeError(describe() + ": expected input [N, " + std::to_string(in_) + ", H, W], got " + ops::describe(x));
  return F::conv_transpose2d(x, weight_, bias_,
                             {.stride = options_.stride, .padding = options_.padding,
                              .output_padding = options_.output_padding, .dilation = options_.dilation,
                              .groups = options_.groups});
}

std::string ConvTranspose2d::describe() const {
  std::string s = "ConvTranspose2d(" + std::to_string(in_) + ", " + std::to_string(out_) +
                  ", kernel_size=" + pair_str(kernel_) + ", stride=" + pair_str(options_.stride);
  if (options_.padding != Size2(0)) s += ", padding=" + pair_str(options_.padding);
  if (options_.output_padding != Size2(0)) s += ", output_padding=" + pair_str(options_.output_padding);
  if (options_.dilation != Size2(1)) s += ", dilation=" + pair_str(options_.dilation);
  if (options_.groups != 1) s += ", groups=" + std::to_string(options_.groups);
  if (!bias_.defined()) s += ", bias=false";
  return s + ")";
}

}  // namespace mixgrad::nn
