#include "mixgrad/nn/batch_norm.hpp"

#include <cmath>
#include <sstream>

#include "core/sizes.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/nn.hpp"
#include "core/checks.hpp"

namespace mixgrad::nn {

BatchNorm2d::BatchNorm2d(int64_t num_features, const BatchNormOptions& options)
    : channels_(num_features), options_(options) {
  if (num_features < 1) throw ValueError("BatchNorm2d: num_features must be >= 1, got " + std::to_string(num_features));
  sizes::nbytes(Shape{num_features}, DType::float32, "BatchNorm2d");
  if (!(options.eps >= 0 && std::isfinite(options.eps)))
    throw ValueError("BatchNorm2d: eps must be finite and >= 0, got " + std::to_string(options.eps));
  if (!(options.momentum >= 0 && options.momentum <= 1))
    throw ValueError("BatchNorm2d: momentum must be in [0, 1], got " + std::to_string(options.momentum));
  if (options.affine) {
    weight_ = register_parameter("weight", ones({channels_}));
    bias_ = register_parameter("bias", zeros({channels_}));
  }
  if (options.track_running_stats) {
    running_mean_ = register_buffer("running_mean", zeros({channels_}));
    running_var_ = register_buffer("running_var", ones({channels_}));
  }
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  core::check_defined("BatchNorm2d", {&x});
  if (x.ndim() != 4 || x.shape()[1] != channels_)
    throw ShapeError(describe() + ": expected input [N, " + std::to_string(channels_) + ", H, W], got " +
                     core::describe(x));
  const bool batch_stats = is_training() || !options_.track_running_stats;
  return F::batch_norm(x, running_mean_, running_var_, weight_, bias_,
                       {.training = batch_stats, .momentum = options_.momentum, .eps = options_.eps});
}

std::string BatchNorm2d::describe() const {
  std::ostringstream s;
  s << "BatchNorm2d(" << channels_ << ", eps=" << options_.eps << ", momentum=" << options_.momentum
    << ", affine=" << (options_.affine ? "true" : "false")
    << ", track_running_stats=" << (options_.track_running_stats ? "true" : "false") << ")";
  return s.str();
}

}  // namespace mixgrad::nn
