// mixgrad/nn/rms_norm.hpp — root-mean-square normalisation over the trailing
// dims (Zhang & Sennrich, 2019), as torch.nn.RMSNorm:
//
//   y = x / sqrt(mean(x^2) + eps) * weight
//
//   mg::nn::RMSNorm norm(512);                       // eps: the input dtype's epsilon
//   mg::nn::RMSNorm norm2(512, {.eps = 1e-6});
//
// As PyTorch computes it: normalised in float32 (float64 for float64 input),
// rounded to the input's dtype, then times weight (ones, the normalised
// shape) with type promotion: a bfloat16 input and a float32 weight give
// float32, as in PyTorch.
#pragma once

#include <optional>

#include "mixgrad/nn/module.hpp"

namespace mixgrad::nn {

struct RMSNormOptions {
  /// Added to the mean square; unset: the input dtype's machine epsilon (PyTorch's default).
  std::optional<double> eps{};
  bool elementwise_affine = true;
};

class RMSNorm : public Module {
 public:
  /// ValueError for an empty or non-positive shape, or a negative eps.
  explicit RMSNorm(const Shape& normalized_shape, const RMSNormOptions& options = {});
  explicit RMSNorm(int64_t normalized_size, const RMSNormOptions& options = {})
      : RMSNorm(Shape{normalized_size}, options) {}

  /// ShapeError unless the input's trailing dims are the normalised shape.
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

  const Tensor& weight() const { return weight_; }

 private:
  Shape shape_;
  RMSNormOptions options_;
  Tensor weight_;
};

}  // namespace mixgrad::nn
