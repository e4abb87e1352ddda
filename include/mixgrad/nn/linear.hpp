// mixgrad/nn/linear.hpp — fully connected layer: y = x·Wᵀ + b.
//
//   mg::nn::Linear fc(3136, 128);              // weight [128, 3136], bias [128]
//   auto y = fc(x);                            // x: [N, 3136] (or [..., 3136]) -> [N, 128]
//   mg::nn::Linear head(128, 10, {.bias = false});
//
// Initialised as PyTorch does: weight ~ kaiming_uniform(a = sqrt(5)), i.e.
// U(-1/sqrt(in), 1/sqrt(in)), and bias ~ U(-1/sqrt(in), 1/sqrt(in)).
#pragma once

#include "mixgrad/nn/module.hpp"

namespace mixgrad::nn {

struct LinearOptions {
  bool bias = true;
};

class Linear : public Module {
 public:
  /// Throws ValueError unless in_features and out_features are >= 1.
  Linear(int64_t in_features, int64_t out_features, const LinearOptions& options = {});

  /// F::linear(x, weight, bias); ShapeError unless x's last extent is in_features.
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

  const Tensor& weight() const { return weight_; }
  /// Undefined when built with {.bias = false}.
  const Tensor& bias() const { return bias_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 private:
  int64_t in_, out_;
  Tensor weight_, bias_;
};

}  // namespace mixgrad::nn
