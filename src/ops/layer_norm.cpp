// F::layer_norm: statistics per row over the trailing normalized_shape dims,
// in float32 (float64 for float64 input), whatever the input dtype. The
// weight and bias are handed to the kernel in that accumulation dtype (they
// hold one row's worth of elements), which is what lets a float32 weight go
// with a bfloat16 activation; their gradients come back in their own dtype.
#include <cmath>
#include <string>

#include "backend/normalization.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/nn.hpp"
#include "mixgrad/ops/reduction.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/layer_norm_rows.hpp"
#include "ops/untracked_copy.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

void check_affine(const char* what, const Tensor& t, const Tensor& x, const Shape& normalized_shape) {
  if (!t.defined()) return;
  ops::check_floating("layer_norm", t);
  if (t.shape() != normalized_shape)
    throw ShapeError(std::string("layer_norm: ") + what + " " + ops::describe(t) + " must have normalized_shape " +
                     to_string(normalized_shape) + " (input " + ops::describe(x) + ")");
}

}  // namespace

namespace {

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
  return ops::layer_norm_rows(OpKind::layer_norm, x, normalized_shape, weight, bias, eps);
}

}  // namespace mixgrad::F

namespace mixgrad::ops {

Tensor layer_norm_rows(OpKind op, const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                       double eps) {
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
  autodiff::record(op, {&x, &weight, &bias}, out,
                   [args = grad_args, normalized_shape, x, weight, bias,
                    saved = backend::LayerNormOutputs{.out = Tensor(), .mean = o.mean, .rstd = o.rstd},
                    w_dtype = weight.defined() ? weight.dtype() : acc,
                    b_dtype = bias.defined() ? bias.dtype() : acc](const Tensor& g, autodiff::InputGrads& gi) {
                     const Tensor& xd = args.x;
                     const DType acc = saved.mean.dtype();
                     if (gi.create_graph())
                       return F::layer_norm_grad_graph(x, weight, bias, g, args.rows, args.cols, args.eps, acc, gi);
                     backend::LayerNormGrads grads;
                     if (gi.needs(0)) grads.x = empty(xd.shape(), xd.dtype(), xd.device());
                     if (gi.needs(1)) grads.weight = empty(normalized_shape, acc, xd.device());
                     if (gi.needs(2)) grads.bias = empty(normalized_shape, acc, xd.device());
                     backend::layer_norm_backward(args, saved, ops::dense(g, xd.dtype()), grads);
                     if (gi.needs(0)) gi.set(0, grads.x);
                     if (gi.needs(1)) gi.set(1, ops::in_dtype(grads.weight, w_dtype));
                     if (gi.needs(2)) gi.set(2, ops::in_dtype(grads.bias, b_dtype));
                   });
  return out;
}

}  // namespace mixgrad::ops
