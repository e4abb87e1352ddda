#include "mixgrad/nn/layer_norm.hpp"

#include <cmath>
#include <sstream>

#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/nn.hpp"
#include "nn/normalized_shape.hpp"
#include "core/checks.hpp"

namespace mixgrad::nn {

LayerNorm::LayerNorm(const Shape& normalized_shape, const LayerNormOptions& options)
    : shape_(normalized_shape), options_(options) {
  detail::check_normalized_shape("LayerNorm", shape_);
  detail::check_eps("LayerNorm", options.eps);
  if (options.elementwise_affine) {
    weight_ = register_parameter("weight", ones(shape_));
    if (options.bias) bias_ = register_parameter("bias", zeros(shape_));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  core::check_defined("LayerNorm", {&x});
  return F::layer_norm(x, shape_, weight_, bias_, options_.eps);
}

std::string LayerNorm::describe() const {
  std::ostringstream s;
  s << "LayerNorm(" << to_string(shape_) << ", eps=" << options_.eps
    << ", elementwise_affine=" << (options_.elementwise_affine ? "true" : "false") << ")";
  return s.str();
}

}  // namespace mixgrad::nn
