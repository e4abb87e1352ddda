#include "mixgrad/nn/group_norm.hpp"

#include <cmath>
#include <sstream>

#include "core/sizes.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/nn.hpp"
#include "core/checks.hpp"

namespace mixgrad::nn {

namespace {

void check_eps(const char* module, double eps) {
  if (!(eps >= 0 && std::isfinite(eps)))
    throw ValueError(std::string(module) + ": eps must be finite and >= 0, got " + std::to_string(eps));
}

}  // namespace

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, const GroupNormOptions& options)
    : groups_(num_groups), channels_(num_channels), options_(options) {
  if (num_groups < 1 || num_channels < 1 || num_channels % num_groups != 0)
    throw ValueError("GroupNorm: num_channels (" + std::to_string(num_channels) +
                     ") must be a positive multiple of num_groups (" + std::to_string(num_groups) + ")");
  sizes::nbytes(Shape{num_channels}, DType::float32, "GroupNorm");
  check_eps("GroupNorm", options.eps);
  if (options.affine) {
    weight_ = register_parameter("weight", ones({channels_}));
    bias_ = register_parameter("bias", zeros({channels_}));
  }
}

Tensor GroupNorm::forward(const Tensor& x) {
  core::check_defined("GroupNorm", {&x});
  if (x.ndim() < 2 || x.shape()[1] != channels_)
    throw ShapeError(describe() + ": expected input [N, " + std::to_string(channels_) + ", *], got " +
                     core::describe(x));
  return F::group_norm(x, groups_, weight_, bias_, options_.eps);
}

std::string GroupNorm::describe() const {
  std::ostringstream s;
  s << "GroupNorm(" << groups_ << ", " << channels_ << ", eps=" << options_.eps
    << ", affine=" << (options_.affine ? "true" : "false") << ")";
  return s.str();
}

InstanceNorm2d::InstanceNorm2d(int64_t num_features, const InstanceNormOptions& options)
    : channels_(num_features), options_(options) {
  if (num_features < 1)
    throw ValueError("InstanceNorm2d: num_features must be >= 1, got " + std::to_string(num_features));
  sizes::nbytes(Shape{num_features}, DType::float32, "InstanceNorm2d");
  check_eps("InstanceNorm2d", options.eps);
  if (options.affine) {
    weight_ = register_parameter("weight", ones({channels_}));
    bias_ = register_parameter("bias", zeros({channels_}));
  }
}

Tensor InstanceNorm2d::forward(const Tensor& x) {
  core::check_defined("InstanceNorm2d", {&x});
  if (x.ndim() != 4 || x.shape()[1] != channels_)
    throw ShapeError(describe() + ": expected input [N, " + std::to_string(channels_) + ", H, W], got " +
                     core::describe(x));
  return F::instance_norm(x, weight_, bias_, options_.eps);
}

std::string InstanceNorm2d::describe() const {
  std::ostringstream s;
  s << "InstanceNorm2d(" << channels_ << ", eps=" << options_.eps
    << ", affine=" << (options_.affine ? "true" : "false") << ")";
  return s.str();
}

}  // namespace mixgrad::nn
