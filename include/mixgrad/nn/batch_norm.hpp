// mixgrad/nn/batch_norm.hpp — batch normalisation over the channels of
// [N, C, H, W] inputs (Ioffe & Szegedy, 2015).
//
//   mg::nn::BatchNorm2d bn(32);             // weight 1, bias 0, running_mean 0, running_var 1
//   net.train();  auto y = bn(x);           // batch statistics; running stats updated
//   net.eval();   auto z = bn(x);           // running statistics
//   mg::nn::BatchNorm2d plain(32, {.affine = false, .track_running_stats = false});
//
// running = (1 - momentum) * running + momentum * batch statistic, with the
// unbiased batch variance. The running statistics are buffers: saved in
// state_dict ("running_mean", "running_var"), never trained, float32.
#pragma once

#include "mixgrad/nn/module.hpp"

namespace mixgrad::nn {

struct BatchNormOptions {
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;               // learnable weight and bias
  bool track_running_stats = true;  // false: batch statistics in eval too, no buffers
};

class BatchNorm2d : public Module {
 public:
  /// Throws ValueError for num_features < 1, eps < 0 or momentum outside [0, 1].
  explicit BatchNorm2d(int64_t num_features, const BatchNormOptions& options = {});

  /// F::batch_norm with batch statistics in training (or without running
  /// stats), running statistics in eval; ShapeError unless x is [N, C, H, W].
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

  /// Undefined unless affine.
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  /// Undefined unless track_running_stats.
  const Tensor& running_mean() const { return running_mean_; }
  const Tensor& running_var() const { return running_var_; }
  const BatchNormOptions& options() const { return options_; }

 private:
  int64_t channels_;
  BatchNormOptions options_;
  Tensor weight_, bias_, running_mean_, running_var_;
};

}  // namespace mixgrad::nn
