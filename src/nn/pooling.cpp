#include "mixgrad/nn/pooling.hpp"

#include "mixgrad/ops/nn.hpp"

namespace mixgrad::nn {

namespace {

// Both shapes' strings are appended piece by piece: GCC 12 warns
// (-Wrestrict, a false positive) at "(" + std::string once inlined.
std::string pair_str(Size2 s) {
  std::string r = "(";
  r.append(std::to_string(s.h)).append(", ").append(std::to_string(s.w)).append(")");
  return r;
}

void check_pool(const char* name, Size2 kernel, const Pool2dOptions& o) {
  if (kernel.h < 1 || kernel.w < 1 || o.stride.h < 0 || o.stride.w < 0 || o.padding.h < 0 || o.padding.w < 0)
    throw ValueError(std::string(name) + ": kernel_size must be >= 1 and stride, padding >= 0; got kernel_size=" +
                     pair_str(kernel) + ", stride=" + pair_str(o.stride) + ", padding=" + pair_str(o.padding));
}

std::string pool_str(const char* name, Size2 kernel, const Pool2dOptions& o) {
  const Size2 stride = o.stride == Size2(0) ? kernel : o.stride;
  return std::string(name) + "(kernel_size=" + pair_str(kernel) + ", stride=" + pair_str(stride) +
         ", padding=" + pair_str(o.padding) + ")";
}

void check_pool1d(const char* name, int64_t kernel, const Pool1dOptions& o) {
  if (kernel < 1 || o.stride < 0 || o.padding < 0)
    throw ValueError(std::string(name) + ": kernel_size must be >= 1 and stride, padding >= 0; got kernel_size=" +
                     std::to_string(kernel) + ", stride=" + std::to_string(o.stride) +
                     ", padding=" + std::to_string(o.padding));
}

std::string pool1d_str(const char* name, int64_t kernel, const Pool1dOptions& o) {
  return std::string(name) + "(kernel_size=" + std::to_string(kernel) +
         ", stride=" + std::to_string(o.stride == 0 ? kernel : o.stride) + ", padding=" + std::to_string(o.padding) +
         ")";
}

std::string triple_str(Size3 s) {
  std::string r = "(";
  r.append(std::to_string(s.d)).append(", ").append(std::to_string(s.h)).append(", ");
  r.append(std::to_string(s.w)).append(")");
  return r;
}

void check_pool3d(const char* name, Size3 k, const Pool3dOptions& o) {
  if (k.d < 1 || k.h < 1 || k.w < 1 || o.stride.d < 0 || o.stride.h < 0 || o.stride.w < 0 || o.padding.d < 0 ||
      o.padding.h < 0 || o.padding.w < 0)
    throw ValueError(std::string(name) + ": kernel_size must be >= 1 and stride, padding >= 0; got kernel_size=" +
                     triple_str(k) + ", stride=" + triple_str(o.stride) + ", padding=" + triple_str(o.padding));
}

std::string pool3d_str(const char* name, Size3 k, const Pool3dOptions& o) {
  const Size3 stride = o.stride == Size3(0) ? k : o.stride;
  return std::string(name) + "(kernel_size=" + triple_str(k) + ", stride=" + triple_str(stride) +
         ", padding=" + triple_str(o.padding) + ")";
}

}  // namespace

MaxPool2d::MaxPool2d(Size2 kernel_size, const Pool2dOptions& options) : kernel_(kernel_size), options_(options) {
  check_pool("MaxPool2d", kernel_, options_);
}

Tensor MaxPool2d::forward(const Tensor& x) {
  return F::max_pool2d(x, {.kernel_size = kernel_, .stride = options_.stride, .padding = options_.padding});
}

std::string MaxPool2d::describe() const { return pool_str("MaxPool2d", kernel_, options_); }

AvgPool2d::AvgPool2d(Size2 kernel_size, const Pool2dOptions& options) : kernel_(kernel_size), options_(options) {
  check_pool("AvgPool2d", kernel_, options_);
}

Tensor AvgPool2d::forward(const Tensor& x) {
  return F::avg_pool2d(x, {.kernel_size = kernel_, .stride = options_.stride, .padding = options_.padding});
}

std::string AvgPool2d::describe() const { return pool_str("AvgPool2d", kernel_, options_); }

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Size2 output_size) : output_size_(output_size) {
  if (output_size.h < 1 || output_size.w < 1)
    throw ValueError("AdaptiveAvgPool2d: output_size must be >= 1, got " + pair_str(output_size));
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) { return F::adaptive_avg_pool2d(x, output_size_); }

std::string AdaptiveAvgPool2d::describe() const { return "AdaptiveAvgPool2d(output_size=" + pair_str(output_size_) + ")"; }

MaxPool1d::MaxPool1d(int64_t kernel_size, const Pool1dOptions& options) : kernel_(kernel_size), options_(options) {
  check_pool1d("MaxPool1d", kernel_, options_);
}

Tensor MaxPool1d::forward(const Tensor& x) {
  return F::max_pool1d(x, {.kernel_size = kernel_, .stride = options_.stride, .padding = options_.padding});
}

std::string MaxPool1d::describe() const { return pool1d_str("MaxPool1d", kernel_, options_); }

AvgPool1d::AvgPool1d(int64_t kernel_size, const Pool1dOptions& options) : kernel_(kernel_size), options_(options) {
  check_pool1d("AvgPool1d", kernel_, options_);
}

Tensor AvgPool1d::forward(const Tensor& x) {
  return F::avg_pool1d(x, {.kernel_size = kernel_, .stride = options_.stride, .padding = options_.padding});
}

std::string AvgPool1d::describe() const { return pool1d_str("AvgPool1d", kernel_, options_); }

MaxPool3d::MaxPool3d(Size3 kernel_size, const Pool3dOptions& options) : kernel_(kernel_size), options_(options) {
  check_pool3d("MaxPool3d", kernel_, options_);
}

Tensor MaxPool3d::forward(const Tensor& x) {
  return F::max_pool3d(x, {.kernel_size = kernel_, .stride = options_.stride, .padding = options_.padding});
}

std::string MaxPool3d::describe() const { return pool3d_str("MaxPool3d", kernel_, options_); }

AvgPool3d::AvgPool3d(Size3 kernel_size, const Pool3dOptions& options) : kernel_(kernel_size), options_(options) {
  check_pool3d("AvgPool3d", kernel_, options_);
}

Tensor AvgPool3d::forward(const Tensor& x) {
  return F::avg_pool3d(x, {.kernel_size = kernel_, .stride = options_.stride, .padding = options_.padding});
}

std::string AvgPool3d::describe() const { return pool3d_str("AvgPool3d", kernel_, options_); }

}  // namespace mixgrad::nn
