// mixgrad/nn/layer_norm.hpp — layer normalisation over the trailing dims
// (Ba et al., 2016).
//
//   mg::nn::LayerNorm ln(512);                 // over the last dim of [..., 512]
//   mg::nn::LayerNorm ln2({8, 8}, {.eps = 1e-6});
//   auto y = ln(x);
//
// weight (ones) and bias (zeros) have the normalised shape.
#pragma once

#include "mixgrad/nn/module.hpp"

namespace mixgrad::nn {

struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;  // learnable weight (and bias)
  bool bias = true;                // with elementwise_affine: also a bias
};

class LayerNorm : public Module {
 public:
  /// Throws ValueError for an empty or non-positive shape, or eps < 0.
  explicit LayerNorm(const Shape& normalized_shape, const LayerNormOptions& options = {});
  explicit LayerNorm(int64_t normalized_size, const LayerNormOptions& options = {})
      : LayerNorm(Shape{normalized_size}, options) {}

  /// F::layer_norm over the trailing normalized_shape dims.
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  const Shape& normalized_shape() const { return shape_; }

 private:
  Shape shape_;
  LayerNormOptions options_;
  Tensor weight_, bias_;
};

}  // namespace mixgrad::nn
