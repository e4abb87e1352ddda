// mixgrad/nn/pooling.hpp — 2-d pooling over [N, C, H, W] inputs, 1-d
// pooling over [N, C, L] sequences and 3-d pooling over [N, C, D, H, W] volumes.
//
//   mg::nn::MaxPool2d(2);                             // 2x2, stride 2
//   mg::nn::MaxPool2d(3, {.stride = 2, .padding = 1});
//   mg::nn::AvgPool2d(2);                             // padded cells not counted
//   mg::nn::AdaptiveAvgPool2d(1);                     // global average: [N, C, 1, 1]
//   mg::nn::MaxPool1d(3, {.stride = 2, .padding = 1}); // [N, C, L] -> [N, C, (L - 1) / 2 + 1]
//   mg::nn::AvgPool3d({1, 2, 2});                     // halves H and W of [N, C, D, H, W]
#pragma once

#include "mixgrad/nn/module.hpp"
#include "mixgrad/ops/options.hpp"

namespace mixgrad::nn {

struct Pool2dOptions {
  Size2 stride = 0;  // 0: the kernel size
  Size2 padding = 0;
};

class MaxPool2d : public Module {
 public:
  /// Throws ValueError for a kernel < 1, a stride < 0 or padding < 0.
  explicit MaxPool2d(Size2 kernel_size, const Pool2dOptions& options = {});
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

 private:
  Size2 kernel_;
  Pool2dOptions options_;
};

class AvgPool2d : public Module {
 public:
  /// Throws ValueError for a kernel < 1, a stride < 0 or padding < 0.
  explicit AvgPool2d(Size2 kernel_size, const Pool2dOptions& options = {});
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

 private:
  Size2 kernel_;
  Pool2dOptions options_;
};

/// Average pooling to a fixed output size whatever the input size.
class AdaptiveAvgPool2d : public Module {
 public:
  /// Throws ValueError for an output size < 1.
  explicit AdaptiveAvgPool2d(Size2 output_size);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

 private:
  Size2 output_size_;
};

struct Pool1dOptions {
  int64_t stride = 0;  // 0: the kernel size
  int64_t padding = 0;
};

class MaxPool1d : public Module {
 public:
  /// Throws ValueError for a kernel < 1, a stride < 0 or padding < 0.
  explicit MaxPool1d(int64_t kernel_size, const Pool1dOptions& options = {});
  /// F::max_pool1d; ShapeError unless x is [N, C, L].
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

 private:
  int64_t kernel_;
  Pool1dOptions options_;
};

class AvgPool1d : public Module {
 public:
  /// Throws ValueError for a kernel < 1, a stride < 0 or padding < 0.
  explicit AvgPool1d(int64_t kernel_size, const Pool1dOptions& options = {});
  /// F::avg_pool1d (padded cells not counted); ShapeError unless x is [N, C, L].
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

 private:
  int64_t kernel_;
  Pool1dOptions options_;
};

struct Pool3dOptions {
  Size3 stride = 0;  // 0: the kernel size
  Size3 padding = 0;
};

class MaxPool3d : public Module {
 public:
  /// Throws ValueError for a kernel < 1, a stride < 0 or padding < 0.
  explicit MaxPool3d(Size3 kernel_size, const Pool3dOptions& options = {});
  /// F::max_pool3d; ShapeError unless x is [N, C, D, H, W].
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

 private:
  Size3 kernel_;
  Pool3dOptions options_;
};

class AvgPool3d : public Module {
 public:
  /// Throws ValueError for a kernel < 1, a stride < 0 or padding < 0.
  explicit AvgPool3d(Size3 kernel_size, const Pool3dOptions& options = {});
  /// F::avg_pool3d (padded cells not counted); ShapeError unless x is [N, C, D, H, W].
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

 private:
  Size3 kernel_;
  Pool3dOptions options_;
};

}  // namespace mixgrad::nn
