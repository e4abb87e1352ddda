// F::group_norm and F::instance_norm. A contiguous [N, C, *] input viewed as
// N * G rows of C / G * spatial elements is exactly what the layer-norm
// kernels normalise (one row per (sample, group), biased variance, float32
// statistics for 16-bit input), so the normalisation runs on them without a
// weight; the per-channel affine is then a broadcast mul and add, whose
// gradients (a sum over N and the positions) the elementwise ops provide.
// instance_norm is group_norm with one channel per group: the same
// statistics over the same elements, so the same result bit for bit.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/nn.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"
#include "ops/layer_norm_rows.hpp"

namespace mixgrad::F {

namespace {

std::string context(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  std::string s = " (input " + ops::describe(x);
  if (weight.defined()) s += ", weight " + ops::describe(weight);
  if (bias.defined()) s += ", bias " + ops::describe(bias);
  return s + ")";
}

/// Everything group_norm / instance_norm check before touching any state.
void validate(const char* op, const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias,
              double eps) {
  ops::check_defined(op, {&x});
  ops::check_same_device(op, {&x, &weight, &bias});
  ops::check_floating(op, x);
  if (weight.defined()) ops::check_floating(op, weight);
  if (bias.defined()) ops::check_floating(op, bias);
  if (x.ndim() < 2)
    throw ShapeError(std::string(op) + ": input must be [N, C, *] (at least 2 dims)" + context(x, weight, bias));
  const int64_t channels = x.shape()[1];
  if (num_groups < 1 || channels % num_groups != 0)
    throw ShapeError(std::string(op) + ": " + std::to_string(channels) + " channels do not split into " +
                     std::to_string(num_groups) + " groups" + context(x, weight, bias));
  for (const Tensor* t : {&weight, &bias})
    if (t->defined() && t->shape() != Shape{channels})
      throw ShapeError(std::string(op) + ": " + (t == &weight ? "weight" : "bias") + " must have shape [" +
                       std::to_string(channels) + "]" + context(x, weight, bias));
  if (!(eps >= 0.0 && std::isfinite(eps)))
    throw ValueError(std::string(op) + ": eps must be finite and >= 0, got " + std::to_string(eps) +
                     context(x, weight, bias));
}

/// A per-channel parameter [C] as [1, C, 1, ...] in x's dtype (recorded, so
/// its gradient returns in its own dtype).
Tensor channel_view(const Tensor& p, const Tensor& x) {
  std::vector<int64_t> dims(static_cast<size_t>(x.ndim()), 1);
  dims[1] = x.shape()[1];
  const Tensor same = p.dtype() == x.dtype() ? p : astype(p, x.dtype());
  return reshape(same, Shape(dims));
}

/// The validated, autocast group norm.
Tensor group_norm_impl(OpKind op, const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  const int64_t n = x.shape()[0];
  const int64_t cols = n == 0 ? 0 : x.numel() / (n * num_groups);
  Tensor y = ops::layer_norm_rows(op, x, Shape{cols}, Tensor(), Tensor(), eps);
  if (weight.defined()) y = mul(y, channel_view(weight, x));
  if (bias.defined()) y = add(y, channel_view(bias, x));
  return y;
}

}  // namespace

Tensor group_norm(const Tensor& x_in, int64_t num_groups, const Tensor& weight_in, const Tensor& bias_in, double eps) {
  validate("group_norm", x_in, num_groups, weight_in, bias_in, eps);
  Tensor x = x_in, weight = weight_in, bias = bias_in;
  amp::autocast_inputs(OpKind::group_norm, {&x, &weight, &bias});
  return group_norm_impl(OpKind::group_norm, x, num_groups, weight, bias, eps);
}

Tensor instance_norm(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, double eps) {
  // Zero channels form one (empty) group.
  const int64_t channels = x_in.defined() && x_in.ndim() >= 2 ? std::max<int64_t>(1, x_in.shape()[1]) : 1;
  validate("instance_norm", x_in, channels, weight_in, bias_in, eps);
  Tensor x = x_in, weight = weight_in, bias = bias_in;
  amp::autocast_inputs(OpKind::instance_norm, {&x, &weight, &bias});
  return group_norm_impl(OpKind::instance_norm, x, channels, weight, bias, eps);
}

}  // namespace mixgrad::F
