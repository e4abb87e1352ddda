#include "mixgrad/nn/init.hpp"

#include <cmath>

#include "hooks/op_hooks.hpp"
#include "core/sizes.hpp"
#include "mixgrad/ops/creation.hpp"
#include "core/checks.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::nn::init {

namespace {

void check(const Tensor& t, const char* fn) {
  if (!t.defined()) throw StateError(std::string("nn::init::") + fn + ": undefined tensor");
  if (!is_floating_point(t.dtype()))
    throw DTypeError(std::string("nn::init::") + fn + ": expected a floating tensor, got " + core::describe(t));
}

// Draws in float32 (float64 for float64 tensors) and converts into the
// tensor's storage, so a float16 weight gets the rounded float32 draw and any
// strided view is filled in place.
DType draw_dtype(const Tensor& t) { return t.dtype() == DType::float64 ? DType::float64 : DType::float32; }

Tensor fill_from(const Tensor& t, const Tensor& values) {
  ops::overwrite(t, values);
  return t;
}

Tensor fill_uniform(const Tensor& t, double low, double high) {
  return fill_from(t, mixgrad::uniform(t.shape(), low, high, draw_dtype(t)));
}

Tensor fill_normal(const Tensor& t, double mean, double std) {
  return fill_from(t, mixgrad::normal(t.shape(), mean, std, draw_dtype(t)));
}

double kaiming_std(const Tensor& t, const KaimingOptions& o, const char* fn) {
  check(t, fn);
  const auto [fan_in, fan_out] = fan_in_and_fan_out(t.shape());
  const int64_t fan = o.mode == FanMode::fan_in ? fan_in : fan_out;
  if (fan == 0) throw ShapeError(std::string("nn::init::") + fn + ": zero fan for shape " + to_string(t.shape()));
  return calculate_gain(o.nonlinearity, o.a) / std::sqrt(static_cast<double>(fan));
}

double xavier_std(const Tensor& t, double gain, const char* fn) {
  check(t, fn);
  const auto [fan_in, fan_out] = fan_in_and_fan_out(t.shape());
  if (fan_in == 0 && fan_out == 0)
    throw ShapeError(std::string("nn::init::") + fn + ": zero fans for shape " + to_string(t.shape()));
  return gain * std::sqrt(2.0 / (static_cast<double>(fan_in) + static_cast<double>(fan_out)));
}

}  // namespace

double calculate_gain(Nonlinearity nonlinearity, double param) {
  switch (nonlinearity) {
    case Nonlinearity::linear:
    case Nonlinearity::sigmoid: return 1.0;
    case Nonlinearity::tanh: return 5.0 / 3.0;
    case Nonlinearity::relu: return std::sqrt(2.0);
    case Nonlinearity::leaky_relu: return std::sqrt(2.0 / (1.0 + param * param));
  }
  return 1.0;
}

std::pair<int64_t, int64_t> fan_in_and_fan_out(const Shape& shape) {
  if (shape.ndim() < 2)
    throw ShapeError("nn::init: fans need a weight of at least 2 dims, got shape " + to_string(shape));
  // Any shape may be asked about, not only a tensor's: every product is checked.
  auto context = [&] { return "the fans of shape " + to_string(shape); };
  int64_t receptive = 1;
  for (int d = 2; d < shape.ndim(); ++d) receptive = sizes::mul(receptive, shape[d], "nn::init", context);
  return {sizes::mul(shape[1], receptive, "nn::init", context), sizes::mul(shape[0], receptive, "nn::init", context)};
}

Tensor kaiming_uniform_(const Tensor& t, const KaimingOptions& options) {
  const double bound = std::sqrt(3.0) * kaiming_std(t, options, "kaiming_uniform_");
  return fill_uniform(t, -bound, bound);
}

Tensor kaiming_normal_(const Tensor& t, const KaimingOptions& options) {
  return fill_normal(t, 0.0, kaiming_std(t, options, "kaiming_normal_"));
}

Tensor xavier_uniform_(const Tensor& t, double gain) {
  const double bound = std::sqrt(3.0) * xavier_std(t, gain, "xavier_uniform_");
  return fill_uniform(t, -bound, bound);
}

Tensor xavier_normal_(const Tensor& t, double gain) { return fill_normal(t, 0.0, xavier_std(t, gain, "xavier_normal_")); }

Tensor uniform_(const Tensor& t, double low, double high) {
  check(t, "uniform_");
  return fill_uniform(t, low, high);
}

Tensor normal_(const Tensor& t, double mean, double std) {
  check(t, "normal_");
  return fill_normal(t, mean, std);
}

Tensor constant_(const Tensor& t, double value) {
  check(t, "constant_");
  ops::overwrite(t, value);
  return t;
}

Tensor zeros_(const Tensor& t) { return constant_(t, 0.0); }
Tensor ones_(const Tensor& t) { return constant_(t, 1.0); }

}  // namespace mixgrad::nn::init
