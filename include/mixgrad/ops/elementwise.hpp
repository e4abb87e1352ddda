// mixgrad/ops/elementwise.hpp — elementwise math with NumPy broadcasting.
//
// Binary ops promote mixed dtypes to the wider one (float16 with bfloat16
// gives float32, int8 with uint8 int32); a scalar takes the tensor's dtype
// (converted as Tensor::to converts). Each op has a gradient.
// add, sub, mul, maximum, minimum, neg, abs, clamp and relu also take integer
// tensors (int8, uint8, int32, int64; the result wraps on overflow, as in
// PyTorch); the other arithmetic needs floating tensors (convert with
// .to(DType::float32)); comparisons and where take any dtype. Errors name
// the op, shapes and dtypes (ShapeError, DTypeError).
//
//   auto y = mg::F::relu(x * w + b);
//   auto m = mg::F::where(x > 0.f, x, 0.1f * x);
#pragma once

#include "mixgrad/ops/options.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::F {

/// a + b with broadcasting; the gradient of a broadcast input is summed
/// back to its shape.
Tensor add(const Tensor& a, const Tensor& b);
/// a - b with broadcasting.
Tensor sub(const Tensor& a, const Tensor& b);
/// a * b with broadcasting.
Tensor mul(const Tensor& a, const Tensor& b);
/// a / b with broadcasting; floating tensors only (IEEE: x / 0 is +-inf or NaN).
/// Under autocast float32 on the CPU, the wider input dtype on CUDA.
Tensor div(const Tensor& a, const Tensor& b);
/// a ** b elementwise (gradient for both; the base must be positive where the
/// exponent's gradient is wanted).
Tensor pow(const Tensor& a, const Tensor& b);
/// a ** exponent elementwise.
Tensor pow(const Tensor& a, double exponent);
/// The larger of a and b elementwise; NaN in either gives NaN. On a tie the
/// gradient is split evenly between a and b.
Tensor maximum(const Tensor& a, const Tensor& b);
/// The smaller of a and b elementwise; NaN in either gives NaN; ties split
/// the gradient.
Tensor minimum(const Tensor& a, const Tensor& b);
/// cond ? a : b, with cond a bool tensor; broadcasts all three.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// Scalar forms: the scalar takes the tensor's dtype.
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor sub(double a, const Tensor& b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor div(double a, const Tensor& b);
Tensor maximum(const Tensor& a, double b);
Tensor minimum(const Tensor& a, double b);

// Comparisons give bool tensors and have no gradient.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
// Comparisons with a scalar, which takes the tensor's dtype.
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);

/// -x.
Tensor neg(const Tensor& x);
/// e ** x (runs in float32 under autocast).
Tensor exp(const Tensor& x);
/// Natural logarithm (runs in float32 under autocast).
Tensor log(const Tensor& x);
/// Square root (under autocast float32 on the CPU, the input's dtype on CUDA).
Tensor sqrt(const Tensor& x);
/// 1 / sqrt(x) (runs in float32 under autocast).
Tensor rsqrt(const Tensor& x);
/// |x|; the gradient at 0 is 0.
Tensor abs(const Tensor& x);
/// min(max(x, lo), hi); the gradient passes where lo <= x <= hi. NaN stays
/// NaN; lo > hi throws ValueError.
Tensor clamp(const Tensor& x, double lo, double hi);

/// max(x, 0); NaN stays NaN, the gradient at 0 is 0.
Tensor relu(const Tensor& x);
/// x for x > 0, negative_slope * x otherwise.
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
/// Exact (erf) GELU.
Tensor gelu(const Tensor& x);
/// PyTorch's `approximate` argument of gelu: none (erf) or tanh.
enum class GeluApproximation { none, tanh };
/// GELU; with tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GPT-2's),
/// one fused kernel as the exact form (float32 inside for 16-bit inputs).
Tensor gelu(const Tensor& x, GeluApproximation approximate);
/// 1 / (1 + e^-x).
Tensor sigmoid(const Tensor& x);
/// Hyperbolic tangent.
Tensor tanh(const Tensor& x);
/// x * sigmoid(x) (a.k.a. swish).
Tensor silu(const Tensor& x);
/// log(1 + e^(beta x)) / beta, and x where beta x > threshold (PyTorch's
/// softplus; the gradient there is 1). Runs in float32 under autocast. A
/// zero or non-finite beta or a NaN threshold throws ValueError.
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
/// x * relu6(x + 3) / 6. The gradient is 0 below -3, x / 3 + 1/2 on
/// [-3, 3] and 1 above 3 (PyTorch's one-sided choice at the kinks).
Tensor hardswish(const Tensor& x);
/// x * tanh(softplus(x)).
Tensor mish(const Tensor& x);
/// x clamped to [min_val, max_val] (PyTorch's hardtanh); floating tensors
/// only. The gradient passes strictly inside (min_val, max_val), 0 at and
/// beyond the bounds; min_val > max_val throws ValueError.
Tensor hardtanh(const Tensor& x, double min_val = -1.0, double max_val = 1.0);

/// Sine (radians).
Tensor sin(const Tensor& x);
/// Cosine (radians).
Tensor cos(const Tensor& x);
/// Tangent (radians; runs in float32 under autocast).
Tensor tan(const Tensor& x);
/// log(1 + x), accurate for small x (runs in float32 under autocast).
Tensor log1p(const Tensor& x);
/// e^x - 1, accurate for small x (runs in float32 under autocast).
Tensor expm1(const Tensor& x);
/// The error function, 2 / sqrt(pi) times the integral of e^(-t^2) from 0 to x.
Tensor erf(const Tensor& x);

}  // namespace mixgrad::F

namespace mixgrad {

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(const Tensor& a, double b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(const Tensor& a, double b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(const Tensor& a, double b);
Tensor operator/(double a, const Tensor& b);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, double b);
Tensor operator<(const Tensor& a, double b);
Tensor operator>=(const Tensor& a, double b);
Tensor operator<=(const Tensor& a, double b);

}  // namespace mixgrad
