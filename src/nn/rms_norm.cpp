#include "mixgrad/nn/rms_norm.hpp"

#include <cmath>
#include <limits>
#include <sstream>

#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/reduction.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "nn/normalized_shape.hpp"
#include "core/checks.hpp"

namespace mixgrad::nn {

RMSNorm::RMSNorm(const Shape& normalized_shape, const RMSNormOptions& options)
    : shape_(normalized_shape), options_(options) {
  detail::check_normalized_shape("RMSNorm", shape_);
  if (options.eps) detail::check_eps("RMSNorm", *options.eps);
  if (options.elementwise_affine) weight_ = register_parameter("weight", ones(shape_));
}

Tensor RMSNorm::forward(const Tensor& x) {
  core::check_defined("RMSNorm", {&x});
  core::check_floating("RMSNorm", x);
  const int k = shape_.ndim();
  bool fits = k <= x.ndim();
  for (int i = 0; fits && i < k; ++i) fits = x.shape()[x.ndim() - k + i] == shape_[i];
  if (!fits)
    throw ShapeError(describe() + ": the input's trailing dims must be " + to_string(shape_) + ", got " +
                     core::describe(x));
  const DType acc = x.dtype() == DType::float64 ? DType::float64 : DType::float32;
  const double eps = options_.eps ? *options_.eps
                     : x.dtype() == DType::float64 ? std::numeric_limits<double>::epsilon()
                     : x.dtype() == DType::float32 ? std::numeric_limits<float>::epsilon()
                     : x.dtype() == DType::bfloat16 ? 0.0078125   // 2^-7
                                                    : 0.0009765625;  // float16: 2^-10
  std::vector<int> axes;
  for (int i = 0; i < k; ++i) axes.push_back(x.ndim() - k + i);
  const Tensor xa = F::astype(x, acc);
  const Tensor y = F::mul(xa, F::rsqrt(F::add(F::mean(F::mul(xa, xa), Axes(axes), true), eps)));
  const Tensor out = F::astype(y, x.dtype());
  return weight_.defined() ? F::mul(out, weight_) : out;
}

std::string RMSNorm::describe() const {
  std::ostringstream s;
  s << "RMSNorm(" << to_string(shape_);
  if (options_.eps) s << ", eps=" << *options_.eps;
  s << ", elementwise_affine=" << (options_.elementwise_affine ? "true" : "false") << ")";
  return s.str();
}

}  // namespace mixgrad::nn
