// F::batch_norm. Statistics are computed in float32 (float64 for float64
// input) whatever the input dtype, so float16 / bfloat16 activations with
// float32 weight, bias and running statistics work as they come out of
// autocast; the output keeps the input's dtype. In training the running
// statistics are updated in place (unbiased variance) after the forward has
// succeeded, and their version is bumped.
#include "backend/batch_norm.hpp"

#include <cmath>
#include <string>

#include "backend/copy.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/nn.hpp"
#include "mixgrad/ops/reduction.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "core/view.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

// t as a contiguous tensor of dtype dt, unrecorded; undefined stays undefined.
Tensor converted(const Tensor& t, DType dt) { return t.defined() ? ops::dense(t, dt) : Tensor(); }

// A dense tensor as the kernels read it: a channels-last [N, C, H, W] (or
// [N, C, D, H, W]) one as the [N * H * W, C] rows it is in memory
// (BatchNorm1d's layout: the same per-channel statistics), any other as it is.
Tensor as_rows(const Tensor& t, MemoryFormat format) {
  if (format == MemoryFormat::contiguous) return t;
  const Shape& s = t.shape();
  int64_t rows = 1;
  for (int d = 0; d < s.ndim(); ++d)
    if (d != 1) rows *= s[d];
  return view::make(t, Shape{rows, s[1]}, Shape{s[1], 1});
}

void check_channel_vector(const char* what, const Tensor& t, const Tensor& x) {
  if (!t.defined()) return;
  if (!is_floating_point(t.dtype()))
    throw DTypeError(std::string("batch_norm: ") + what + " must be floating, got " + ops::describe(t));
  if (t.ndim() != 1 || t.shape()[0] != x.shape()[1])
    throw ShapeError(std::string("batch_norm: ") + what + " " + ops::describe(t) + " does not fit input " +
                     ops::describe(x) + " (expected [C])");
}

/// batch_norm's gradients as tracked F:: ops, for a recorded backward. In
/// training the statistics are recomputed from x (they move with it); in
/// evaluation the running ones (copies) are constants. Per channel (dim 1),
/// in the statistics dtype.
void batch_norm_grad_graph(const Tensor& x, const Tensor& weight, const Tensor& mean_copy, const Tensor& var_copy,
                           bool training, double eps, const Tensor& g, DType w_dtype, DType b_dtype,
                           autodiff::InputGrads& gi) {
  const DType acc = mean_copy.dtype();
  std::vector<int> axes{0};
  for (int d = 2; d < x.ndim(); ++d) axes.push_back(d);
  std::vector<int64_t> dims(static_cast<size_t>(x.ndim()), 1);
  dims[1] = x.shape()[1];
  const Shape per_channel(dims);
  const Tensor xa = astype(x, acc), ga = astype(g, acc);
  Tensor xhat, rstd;
  if (training) {
    rstd = rsqrt(add(var(xa, axes, true, 0), eps));
    xhat = mul(sub(xa, mean(xa, axes, true)), rstd);
  } else {
    rstd = reshape(rsqrt(add(var_copy, eps)), per_channel);
    xhat = mul(sub(xa, reshape(mean_copy, per_channel)), rstd);
  }
  if (gi.needs(0)) {
    const Tensor dxhat = weight.defined() ? mul(ga, reshape(astype(weight, acc), per_channel)) : ga;
    const Tensor dx = training ? mul(rstd, sub(sub(dxhat, mean(dxhat, axes, true)),
                                               mul(xhat, mean(mul(dxhat, xhat), axes, true))))
                               : mul(dxhat, rstd);
    gi.set(0, astype(dx, x.dtype()));
  }
  if (gi.needs(1)) gi.set(1, astype(sum(mul(ga, xhat), axes), w_dtype));
  if (gi.needs(2)) gi.set(2, astype(sum(ga, axes), b_dtype));
}

// The checks of batch_norm's arguments, before anything runs; returns the
// values per channel (N times the spatial size).
int64_t check_batch_norm(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var,
                         const Tensor& weight_in, const Tensor& bias_in, const BatchNormOptions& o) {
  ops::check_defined("batch_norm", {&x_in});
  ops::check_same_device("batch_norm", {&x_in, &running_mean, &running_var, &weight_in, &bias_in});
  ops::check_floating("batch_norm", x_in);
  if (x_in.ndim() < 2)
    throw ShapeError("batch_norm: expected input [N, C, ...] with at least 2 dims, got " + ops::describe(x_in));
  check_channel_vector("running_mean", running_mean, x_in);
  check_channel_vector("running_var", running_var, x_in);
  check_channel_vector("weight", weight_in, x_in);
  check_channel_vector("bias", bias_in, x_in);
  const int64_t per_channel = x_in.shape()[1] == 0 ? 0 : x_in.numel() / x_in.shape()[1];
  if (o.training && per_channel < 2)
    throw ShapeError("batch_norm: training needs more than one value per channel, got input " + ops::describe(x_in));
  if (!o.training && (!running_mean.defined() || !running_var.defined()))
    throw StateError("batch_norm: evaluation mode needs running_mean and running_var, got " +
                     ops::describe(running_mean) + " and " + ops::describe(running_var));
  if (running_mean.defined() != running_var.defined())
    throw StateError("batch_norm: running_mean and running_var must both be given or both be undefined");
  // Checked in every mode: a NaN momentum would go into the running
  // statistics, an infinite eps would turn the output into zeros.
  if (!(o.eps >= 0.0 && std::isfinite(o.eps)))
    throw ValueError("batch_norm: eps must be finite and >= 0, got " + std::to_string(o.eps) + " for input " +
                     ops::describe(x_in));
  if (!(o.momentum >= 0.0 && o.momentum <= 1.0))
    throw ValueError("batch_norm: momentum must be in [0, 1], got " + std::to_string(o.momentum) + " for input " +
                     ops::describe(x_in));
  return per_channel;
}

}  // namespace

Tensor batch_norm(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight_in,
                  const Tensor& bias_in, const BatchNormOptions& o) {
  const int64_t per_channel = check_batch_norm(x_in, running_mean, running_var, weight_in, bias_in, o);

  Tensor x = x_in, weight = weight_in, bias = bias_in;
  amp::autocast_inputs(OpKind::batch_norm, {&x});

  const DType stats = x.dtype() == DType::float64 ? DType::float64 : DType::float32;
  const int64_t c = x.shape()[1];
  // A channels-last x is normalised as it lies, and y laid out as x.
  const MemoryFormat format = x.suggest_memory_format();
  const Tensor xc = ops::dense(x, x.dtype(), format);
  const Tensor w = converted(weight, stats), b = converted(bias, stats);
  const Tensor mean = empty(Shape{c}, stats, x.device()), var = empty(Shape{c}, stats, x.device());
  if (!o.training) {
    // Copies: the backward must see the statistics of this forward even if a
    // later training step updates the running ones in place.
    backend::copy(running_mean, mean);
    backend::copy(running_var, var);
  }
  Tensor y = empty(x.shape(), x.dtype(), x.device(), format);
  backend::batch_norm_forward({.x = as_rows(xc, format), .weight = w, .bias = b, .mean = mean, .var = var,
                               .y = as_rows(y, format), .training = o.training, .eps = o.eps});
  if (o.training && running_mean.defined()) {
    backend::batch_norm_update_running(
        {.running_mean = running_mean, .running_var = running_var, .mean = mean, .var = var, .momentum = o.momentum,
         .var_correction = static_cast<double>(per_channel) / static_cast<double>(per_channel - 1)});
    running_mean.bump_version();
    running_var.bump_version();
  }

  autodiff::record(OpKind::batch_norm, {&x, &weight, &bias}, y, [&] {
    return [x, weight, xc, w, mean, var, format, training = o.training, eps = o.eps,
            w_dtype = weight.defined() ? weight.dtype() : stats,
            b_dtype = bias.defined() ? bias.dtype() : stats](const Tensor& g_in, autodiff::InputGrads& gi) {
      if (gi.create_graph())
        return batch_norm_grad_graph(x, weight, mean, var, training, eps, g_in, w_dtype, b_dtype, gi);
      const Tensor g = ops::dense(g_in, xc.dtype(), format);
      const Shape cs{xc.shape()[1]};
      const Tensor gx = gi.needs(0) ? empty(xc.shape(), xc.dtype(), xc.device(), format) : Tensor();
      const Tensor gw = gi.needs(1) ? empty(cs, mean.dtype(), xc.device()) : Tensor();
      const Tensor gb = gi.needs(2) ? empty(cs, mean.dtype(), xc.device()) : Tensor();
      backend::batch_norm_backward({.grad_y = as_rows(g, format), .x = as_rows(xc, format), .weight = w,
                                    .mean = mean, .var = var, .grad_x = gx.defined() ? as_rows(gx, format) : gx,
                                    .grad_weight = gw, .grad_bias = gb, .training = training, .eps = eps});
      if (gx.defined()) gi.set(0, gx);
      if (gw.defined()) gi.set(1, converted(gw, w_dtype));
      if (gb.defined()) gi.set(2, converted(gb, b_dtype));
    };
  });
  return y;
}

}  // namespace mixgrad::F
