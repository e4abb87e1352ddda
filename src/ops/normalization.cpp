// F::layer_norm, F::group_norm and F::instance_norm: one computation,
// layer_norm_rows, normalises rows with the backend's layer-norm kernels
// (backend/normalization.hpp).
//
// layer_norm: statistics per row over the trailing normalized_shape dims, in
// float32 (float64 for float64 input), whatever the input dtype. The weight
// and bias are handed to the kernel in that accumulation dtype (they hold one
// row's worth of elements), which is what lets a float32 weight go with a
// bfloat16 activation; their gradients come back in their own dtype.
//
// group_norm: a contiguous [N, C, *] input viewed as N * G rows of
// C / G * spatial elements is exactly what the layer-norm kernels normalise
// (one row per (sample, group), biased variance, float32 statistics for
// 16-bit input), so the normalisation runs on them without a weight; the
// per-channel affine is then a broadcast mul and add, whose gradients (a sum
// over N and the positions) the elementwise ops provide. instance_norm is
// group_norm with one channel per group: the same statistics over the same
// elements, so the same result bit for bit.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/normalization.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/nn.hpp"
#include "mixgrad/ops/reduction.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

// ---- rows: the computation every norm here runs --------------------------

/// layer_norm_rows' gradients as tracked F:: ops (for a recorded backward):
/// the statistics are recomputed from x, so the second derivative sees them
/// move with x. Rows of `cols` elements, in the accumulation dtype.
void layer_norm_grad_graph(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& g, int64_t rows,
                           int64_t cols, double eps, DType acc, autodiff::InputGrads& gi) {
  const Tensor xr = astype(reshape(x, Shape{rows, cols}), acc);
  const Tensor gr = astype(reshape(g, Shape{rows, cols}), acc);
  const Tensor centred = sub(xr, mean(xr, 1, true));
  const Tensor rstd = rsqrt(add(var(xr, 1, true, 0), eps));
  const Tensor xhat = mul(centred, rstd);
  if (gi.needs(0)) {
    const Tensor dxhat = weight.defined() ? mul(gr, astype(reshape(weight, Shape{cols}), acc)) : gr;
    const Tensor dx =
        mul(rstd, sub(sub(dxhat, mean(dxhat, 1, true)), mul(xhat, mean(mul(dxhat, xhat), 1, true))));
    gi.set(0, astype(reshape(dx, x.shape()), x.dtype()));
  }
  if (gi.needs(1)) gi.set(1, astype(reshape(sum(mul(gr, xhat), 0), weight.shape()), weight.dtype()));
  if (gi.needs(2)) gi.set(2, astype(reshape(sum(gr, 0), bias.shape()), bias.dtype()));
}

/// x normalised over its trailing `normalized_shape` elements, with an
/// optional weight and bias of that shape, in x's dtype; statistics in
/// float32 (float64 for float64 x). Recorded as `op`. The caller has validated
/// the inputs and applied its own autocast policy.
Tensor layer_norm_rows(OpKind op, const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                       const Tensor& bias, double eps) {
  const DType acc = x.dtype() == DType::float64 ? DType::float64 : DType::float32;
  const int64_t cols = normalized_shape.numel();
  backend::LayerNormArgs args{.x = ops::dense(x),
                              .weight = weight.defined() ? ops::dense(weight, acc) : Tensor(),
                              .bias = bias.defined() ? ops::dense(bias, acc) : Tensor(),
                              .rows = cols == 0 ? 0 : x.numel() / cols,
                              .cols = cols,
                              .eps = eps};
  backend::LayerNormOutputs o{.out = empty(x.shape(), x.dtype(), x.device()),
                              .mean = empty(Shape{args.rows}, acc, x.device()),
                              .rstd = empty(Shape{args.rows}, acc, x.device())};
  backend::layer_norm_forward(args, o);
  Tensor out = o.out;
  backend::LayerNormArgs grad_args = args;  // the backward never reads the bias
  grad_args.bias = Tensor();
  autodiff::record(op, {&x, &weight, &bias}, out, [&] {
    return [args = grad_args, normalized_shape, x, weight, bias,
            saved = backend::LayerNormOutputs{.out = Tensor(), .mean = o.mean, .rstd = o.rstd},
            w_dtype = weight.defined() ? weight.dtype() : acc,
            b_dtype = bias.defined() ? bias.dtype() : acc](const Tensor& g, autodiff::InputGrads& gi) {
      const Tensor& xd = args.x;
      const DType acc = saved.mean.dtype();
      if (gi.create_graph()) return layer_norm_grad_graph(x, weight, bias, g, args.rows, args.cols, args.eps, acc, gi);
      backend::LayerNormGrads grads;
      if (gi.needs(0)) grads.x = empty(xd.shape(), xd.dtype(), xd.device());
      if (gi.needs(1)) grads.weight = empty(normalized_shape, acc, xd.device());
      if (gi.needs(2)) grads.bias = empty(normalized_shape, acc, xd.device());
      backend::layer_norm_backward(args, saved, ops::dense(g, xd.dtype()), grads);
      if (gi.needs(0)) gi.set(0, grads.x);
      if (gi.needs(1)) gi.set(1, ops::in_dtype(grads.weight, w_dtype));
      if (gi.needs(2)) gi.set(2, ops::in_dtype(grads.bias, b_dtype));
    };
  });
  return out;
}

// ---- layer_norm ---------------------------------------------------------

void check_affine(const char* what, const Tensor& t, const Tensor& x, const Shape& normalized_shape) {
  if (!t.defined()) return;
  ops::check_floating("layer_norm", t);
  if (t.shape() != normalized_shape)
    throw ShapeError(std::string("layer_norm: ") + what + " " + ops::describe(t) + " must have normalized_shape " +
                     to_string(normalized_shape) + " (input " + ops::describe(x) + ")");
}

// ---- group_norm and instance_norm ----------------------------------------

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
  Tensor y = layer_norm_rows(op, x, Shape{cols}, Tensor(), Tensor(), eps);
  if (weight.defined()) y = mul(y, channel_view(weight, x));
  if (bias.defined()) y = add(y, channel_view(bias, x));
  return y;
}

}  // namespace

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight_in, const Tensor& bias_in,
                  double eps) {
  ops::check_defined("layer_norm", {&x_in});
  ops::check_same_device("layer_norm", {&x_in, &weight_in, &bias_in});
  ops::check_floating("layer_norm", x_in);
  const int k = normalized_shape.ndim();
  bool fits = k >= 1 && k <= x_in.ndim();
  for (int i = 0; fits && i < k; ++i) fits = x_in.shape()[x_in.ndim() - k + i] == normalized_shape[i];
  if (!fits)
    throw ShapeError("layer_norm: normalized_shape " + to_string(normalized_shape) +
                     " must be the trailing dims of input " + ops::describe(x_in));
  check_affine("weight", weight_in, x_in, normalized_shape);
  check_affine("bias", bias_in, x_in, normalized_shape);
  if (!(eps >= 0.0 && std::isfinite(eps)))
    throw ValueError("layer_norm: eps must be finite and >= 0, got " + std::to_string(eps) + " for input " +
                     ops::describe(x_in));

  Tensor x = x_in, weight = weight_in, bias = bias_in;
  amp::autocast_inputs(OpKind::layer_norm, {&x, &weight, &bias});
  return layer_norm_rows(OpKind::layer_norm, x, normalized_shape, weight, bias, eps);
}

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
