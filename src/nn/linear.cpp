#include "mixgrad/nn/linear.hpp"

#include "core/sizes.hpp"
#include "mixgrad/ops/linalg.hpp"
#include "nn/default_init.hpp"
#include "core/checks.hpp"

namespace mixgrad::nn {

Linear::Linear(int64_t in_features, int64_t out_features, const LinearOptions& options)
    : in_(in_features), out_(out_features) {
  if (in_features < 1 || out_features < 1)
    throw ValueError("Linear: in_features and out_features must be >= 1, got " + std::to_string(in_features) +
                     " and " + std::to_string(out_features));
  sizes::nbytes(Shape{out_, in_}, DType::float32, "Linear");
  weight_ = register_parameter("weight", empty({out_, in_}));
  if (options.bias) bias_ = register_parameter("bias", empty({out_}));
  detail::reset_weight_and_bias(weight_, bias_);
}

Tensor Linear::forward(const Tensor& x) {
  core::check_defined("Linear", {&x});
  if (x.ndim() < 1 || x.size(-1) != in_)
    throw ShapeError(describe() + ": expected an input whose last extent is " + std::to_string(in_) + ", got " +
                     core::describe(x));
  return F::linear(x, weight_, bias_);
}

std::string Linear::describe() const {
  return "Linear(in_features=" + std::to_string(in_) + ", out_features=" + std::to_string(out_) +
         ", bias=" + (bias_.defined() ? "true" : "false") + ")";
}

}  // namespace mixgrad::nn
