// mixgrad/nn/group_norm.hpp — group normalisation (Wu & He, 2018) and
// instance normalisation (Ulyanov et al., 2016) over [N, C, *] inputs.
//
//   mg::nn::GroupNorm gn(8, 64);                       // 8 groups of 8 channels
//   mg::nn::GroupNorm plain(4, 64, {.eps = 1e-6, .affine = false});
//   mg::nn::InstanceNorm2d in(64);                     // no weight, no running stats
//   mg::nn::InstanceNorm2d in_affine(64, {.affine = true});
//   auto y = gn(x);
//
// Statistics come from each sample alone, so training and evaluation
// compute the same thing. With affine, weight (ones) and bias (zeros) have
// shape [C] and are saved in state_dict as "weight" and "bias".
#pragma once

#include "mixgrad/nn/module.hpp"

namespace mixgrad::nn {

struct GroupNormOptions {
  double eps = 1e-5;
  bool affine = true;  // learnable per-channel weight and bias
};

class GroupNorm : public Module {
 public:
  /// Throws ValueError for num_groups < 1, num_channels not a positive
  /// multiple of num_groups, or eps < 0.
  GroupNorm(int64_t num_groups, int64_t num_channels, const GroupNormOptions& options = {});

  /// F::group_norm; ShapeError unless x is [N, num_channels, *].
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

  /// Undefined unless affine.
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }

 private:
  int64_t groups_, channels_;
  GroupNormOptions options_;
  Tensor weight_, bias_;
};

struct InstanceNormOptions {
  double eps = 1e-5;
  bool affine = false;  // PyTorch's default: no weight and bias
};

/// Instance norm of [N, C, H, W] images without running statistics
/// (PyTorch's InstanceNorm2d with its default track_running_stats=false).
class InstanceNorm2d : public Module {
 public:
  /// Throws ValueError for num_features < 1 or eps < 0.
  explicit InstanceNorm2d(int64_t num_features, const InstanceNormOptions& options = {});

  /// F::instance_norm; ShapeError unless x is [N, num_features, H, W].
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

  /// Undefined unless affine.
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }

 private:
  int64_t channels_;
  InstanceNormOptions options_;
  Tensor weight_, bias_;
};

}  // namespace mixgrad::nn
