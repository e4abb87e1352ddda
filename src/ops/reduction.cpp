// Reductions and their gradients.
//
// Axes become a bit mask for the backend. Gradients of sum, mean and sum_to
// are views: the upstream gradient read with stride 0 along the reduced
// dimensions, so no [N, C]-sized tensor is written for a [C] result until a
// consumer needs one. max / min send the gradient to the first extreme
// element: the reduced axes are moved last and merged, arg_reduce finds the
// index per output, and the gradient is put there. prod works along one axis
// (backend::Axis3).
#include "mixgrad/ops/reduction.hpp"

#include <algorithm>
#include <cmath>

#include "backend/copy.hpp"
#include "backend/elementwise.hpp"
#include "backend/reduction.hpp"
#include "core/view.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

using autodiff::InputGrads;
using backend::ArgReduceOp;
using backend::ReduceOp;

/// Which dimensions a reduction folds, and the shape it produces.
struct AxisPlan {
  uint32_t mask = 0;
  Shape out_shape;
  int64_t count = 1;  // elements folded into each output
};

AxisPlan plan_axes(const char* op, const Tensor& x, const Axes& axes, bool keepdim) {
  AxisPlan plan;
  const int nd = x.ndim();
  if (axes.all()) {
    plan.mask = nd == 0 ? 0u : (1u << nd) - 1u;
  } else {
    for (int axis : axes.list()) {
      const int a = axis < 0 ? axis + nd : axis;
      if (a < 0 || a >= nd)
        throw ShapeError(std::string(op) + ": axis " + std::to_string(axis) + " out of range for " + ops::describe(x));
      if ((plan.mask >> a) & 1u)
        throw ShapeError(std::string(op) + ": axis " + std::to_string(axis) + " repeated for " + ops::describe(x));
      plan.mask |= 1u << a;
    }
  }
  for (int d = 0; d < nd; ++d) {
    if ((plan.mask >> d) & 1u) {
      plan.count *= x.shape()[d];
      if (keepdim) plan.out_shape.push_back(1);
    } else {
      plan.out_shape.push_back(x.shape()[d]);
    }
  }
  return plan;
}

bool reduces_empty_dim(const Tensor& x, uint32_t mask) {
  for (int d = 0; d < x.ndim(); ++d)
    if (((mask >> d) & 1u) && x.shape()[d] == 0) return true;
  return false;
}

/// g (the result of a reduction of x over `mask`, keepdim or not) read in
/// x's rank: extent 1 (or x's extent when `expand`) and stride 0 along the
/// reduced dimensions, so it broadcasts against x without a copy.
Tensor reduced_view(const Tensor& g, const Shape& xshape, uint32_t mask, bool keepdim, bool expand) {
  Shape shape, strides;
  int k = 0;
  for (int d = 0; d < xshape.ndim(); ++d) {
    if ((mask >> d) & 1u) {
      shape.push_back(expand ? xshape[d] : 1);
      strides.push_back(0);
      if (keepdim) ++k;
    } else {
      shape.push_back(xshape[d]);
      strides.push_back(g.strides()[k++]);
    }
  }
  return view::make(g, shape, strides);
}

// The reduced axes of a mask, for a tracked F:: reduction.
Axes axes_of(uint32_t mask, int ndim) {
  std::vector<int> axes;
  for (int d = 0; d < ndim; ++d)
    if ((mask >> d) & 1u) axes.push_back(d);
  return Axes(std::move(axes));
}

// A reduction's gradient g (keepdim or not) spread back over x's shape with
// tracked ops (reshape, broadcast_to), for a recorded backward.
Tensor expand_graph(const Tensor& g, const Shape& xshape, uint32_t mask) {
  Shape kept = xshape;
  for (int d = 0; d < xshape.ndim(); ++d)
    if ((mask >> d) & 1u) kept[d] = 1;
  return broadcast_to(reshape(g, kept), xshape);
}

Tensor reduce(ReduceOp op, const Tensor& x, const AxisPlan& plan, DType dtype, const backend::ReduceParams& params = {}) {
  Tensor out = empty(plan.out_shape, dtype, x.device());
  backend::reduce(op, x, plan.mask, out, params);
  return out;
}

void check_dtype(const char* op, const Tensor& x, bool integers) {
  if (is_floating_point(x.dtype())) return;
  if (integers && x.dtype() != DType::bool_) return;
  throw DTypeError(std::string(op) + ": expected a " + (integers ? "numeric" : "floating") + " tensor, got " +
                   ops::describe(x));
}

/// Gradient of max / min over `mask`: g at the first extreme element of
/// each reduced group, 0 elsewhere.
Tensor extreme_grad(ArgReduceOp op, const Tensor& g, const Tensor& x, uint32_t mask) {
  const Shape& xs = x.shape();
  // Kept dims first, then reduced ones: x as [K, R].
  Shape perm_shape, perm_strides;
  std::array<int, Shape::kMaxDims> pos{};  // x dim -> position in the permuted order
  int64_t rows = 1, width = 1;
  for (int pass = 0; pass < 2; ++pass) {
    for (int d = 0; d < xs.ndim(); ++d) {
      if ((((mask >> d) & 1u) != 0) != (pass == 1)) continue;
      pos[d] = perm_shape.ndim();
      perm_shape.push_back(xs[d]);
      perm_strides.push_back(x.strides()[d]);
      (pass == 0 ? rows : width) *= xs[d];
    }
  }
  const Tensor xp = ops::dense(view::make(x, perm_shape, perm_strides));
  const Tensor x2 = view::make(xp, Shape{rows, width}, Shape{width, 1});
  Tensor index = empty(Shape{rows}, DType::int64, x.device());
  backend::arg_reduce(op, x2, 1, index);
  const Tensor gk = ops::dense(g);
  Tensor dx = empty(Shape{rows, width}, g.dtype(), g.device());
  backend::fill(dx, 0.0);
  backend::put_along_last_axis(view::make(gk, Shape{rows}, Shape{1}), index, dx);
  // Read dx (laid out in the permuted order) back in x's order.
  const Shape cs = contiguous_strides(perm_shape);
  Shape strides = xs;
  for (int d = 0; d < xs.ndim(); ++d) strides[d] = cs[pos[d]];
  return view::make(dx, xs, strides);
}

Tensor max_min(const char* name, OpKind kind, ReduceOp op, ArgReduceOp arg, const Tensor& x_in, const Axes& axes,
               bool keepdim) {
  ops::check_defined(name, {&x_in});
  check_dtype(name, x_in, true);
  const AxisPlan plan = plan_axes(name, x_in, axes, keepdim);
  if (reduces_empty_dim(x_in, plan.mask))
    throw ShapeError(std::string(name) + ": cannot reduce an empty dimension of " + ops::describe(x_in));
  Tensor x = x_in;
  amp::autocast_inputs(kind, {&x});
  Tensor out = reduce(op, x, plan, x.dtype());
  autodiff::record(kind, {&x}, out, [&] {
    return [x, arg, mask = plan.mask](const Tensor& g, InputGrads& gi) {
      if (gi.create_graph()) {
        // g spread back, times the 0/1 choice of the extreme element: the
        // choice is locally constant in x, so the product is the whole gradient.
        const Tensor chosen = extreme_grad(arg, ones_like(g), x, mask);
        return gi.set(0, mul(expand_graph(g, x.shape(), mask), chosen));
      }
      gi.set(0, extreme_grad(arg, g, x, mask));
    };
  });
  return out;
}

/// prod's gradient as tracked F:: ops (a recorded backward): dx_i = g
/// prod_{j != i} x_j, exact with zeros, as a recorded prod over n copies of
/// x with x_i replaced by 1 ([outer, n, n, inner]).
Tensor prod_grad_graph(const Tensor& g, const Tensor& x, const backend::Axis3& a) {
  const Shape wide{a.outer, a.axis, a.axis, a.inner};
  const Tensor idx = arange(a.axis);
  const Tensor eye =
      reshape(eq(reshape(idx, Shape{a.axis, 1}), reshape(idx, Shape{1, a.axis})), Shape{1, a.axis, a.axis, 1})
          .to(x.device());
  const Tensor xs = broadcast_to(reshape(x, Shape{a.outer, 1, a.axis, a.inner}), wide);
  const Tensor others = prod(where(broadcast_to(eye, wide), ones_like(xs), xs), 2);
  const Tensor g3 = reshape(g.dtype() == x.dtype() ? g : astype(g, x.dtype()), Shape{a.outer, 1, a.inner});
  return reshape(mul(others, g3), x.shape());
}

}  // namespace

Tensor sum(const Tensor& x_in, const Axes& axes, bool keepdim) {
  ops::check_defined("sum", {&x_in});
  const AxisPlan plan = plan_axes("sum", x_in, axes, keepdim);
  Tensor x = x_in;
  amp::autocast_inputs(OpKind::sum, {&x});
  const DType dtype = is_floating_point(x.dtype()) ? x.dtype() : DType::int64;
  Tensor out = reduce(ReduceOp::sum, x, plan, dtype);
  autodiff::record(OpKind::sum, {&x}, out, [&] {
    return [xshape = x.shape(), mask = plan.mask, keepdim](const Tensor& g, InputGrads& gi) {
      if (gi.create_graph()) return gi.set(0, expand_graph(g, xshape, mask));
      gi.set(0, reduced_view(g, xshape, mask, keepdim, true));
    };
  });
  return out;
}

Tensor mean(const Tensor& x_in, const Axes& axes, bool keepdim) {
  ops::check_defined("mean", {&x_in});
  check_dtype("mean", x_in, false);
  const AxisPlan plan = plan_axes("mean", x_in, axes, keepdim);
  Tensor x = x_in;
  amp::autocast_inputs(OpKind::mean, {&x});
  Tensor out = reduce(ReduceOp::mean, x, plan, x.dtype());
  autodiff::record(OpKind::mean, {&x}, out, [&] {
    return [xshape = x.shape(), mask = plan.mask, keepdim, count = plan.count](const Tensor& g, InputGrads& gi) {
      if (gi.create_graph())
        return gi.set(0, expand_graph(mul(g, 1.0 / static_cast<double>(count)), xshape, mask));
      Tensor scaled = empty(g.shape(), g.dtype(), g.device());
      backend::binary(backend::BinaryOp::mul, g, 1.0 / static_cast<double>(count), scaled);
      gi.set(0, reduced_view(scaled, xshape, mask, keepdim, true));
    };
  });
  return out;
}

Tensor max(const Tensor& x, const Axes& axes, bool keepdim) {
  return max_min("max", OpKind::max, ReduceOp::max, ArgReduceOp::max, x, axes, keepdim);
}

Tensor min(const Tensor& x, const Axes& axes, bool keepdim) {
  return max_min("min", OpKind::min, ReduceOp::min, ArgReduceOp::min, x, axes, keepdim);
}

Tensor argmax(const Tensor& x_in, int axis, bool keepdim) {
  ops::check_defined("argmax", {&x_in});
  check_dtype("argmax", x_in, true);
  Tensor x = x_in;
  if (x.ndim() == 0) x = view::make(x_in, Shape{1}, Shape{1});  // a 0-d tensor: its one element
  const int a = axis < 0 ? axis + x.ndim() : axis;
  if (a < 0 || a >= x.ndim())
    throw ShapeError("argmax: axis " + std::to_string(axis) + " out of range for " + ops::describe(x_in));
  if (x.shape()[a] == 0) throw ShapeError("argmax: cannot reduce an empty dimension of " + ops::describe(x_in));
  amp::autocast_inputs(OpKind::argmax, {&x});
  Shape shape;
  for (int d = 0; d < x.ndim(); ++d) {
    if (d != a) shape.push_back(x.shape()[d]);
    else if (keepdim) shape.push_back(1);
  }
  if (x_in.ndim() == 0) shape = Shape{};
  Tensor out = empty(shape, DType::int64, x.device());
  backend::arg_reduce(ArgReduceOp::max, x, a, out);
  return out;
}

Tensor var(const Tensor& x_in, const Axes& axes, bool keepdim, int correction) {
  ops::check_defined("var", {&x_in});
  check_dtype("var", x_in, false);
  if (correction < 0) throw ValueError("var: correction must be >= 0, got " + std::to_string(correction));
  const AxisPlan plan = plan_axes("var", x_in, axes, keepdim);
  Tensor x = x_in;
  amp::autocast_inputs(OpKind::var, {&x});
  Tensor out = reduce(ReduceOp::var, x, plan, x.dtype(), {.correction = correction});
  autodiff::record(OpKind::var, {&x}, out, [&] {
    return [x, mask = plan.mask, keepdim, count = plan.count, correction](const Tensor& g_in, InputGrads& gi) {
      const Tensor g = ops::in_dtype(g_in, x.dtype());
      if (gi.create_graph()) {  // 2 (x - mean) g / (n - correction)
        const double divisor = static_cast<double>(std::max<int64_t>(0, count - correction));
        const Tensor centred = sub(x, mean(x, axes_of(mask, x.ndim()), true));
        return gi.set(0, mul(mul(centred, expand_graph(g, x.shape(), mask)), 2.0 / divisor));
      }
      Tensor m = empty(reduced_view(g, x.shape(), mask, keepdim, false).shape(), x.dtype(), x.device());
      backend::reduce(ReduceOp::mean, x, mask, m, {});
      const double divisor = static_cast<double>(std::max<int64_t>(0, count - correction));
      Tensor dx = empty(x.shape(), x.dtype(), x.device());
      backend::var_grad(reduced_view(g, x.shape(), mask, keepdim, false), x, m, 2.0 / divisor, dx);
      gi.set(0, dx);
    };
  });
  return out;
}

Tensor norm(const Tensor& x_in, double p, const Axes& axes, bool keepdim) {
  ops::check_defined("norm", {&x_in});
  check_dtype("norm", x_in, false);
  if (!(p > 0)) throw ValueError("norm: p must be positive (or infinity), got " + std::to_string(p));
  const AxisPlan plan = plan_axes("norm", x_in, axes, keepdim);
  Tensor x = x_in;
  amp::autocast_inputs(OpKind::norm, {&x});
  Tensor out = reduce(ReduceOp::norm, x, plan, x.dtype(), {.p = p});
  autodiff::record(OpKind::norm, {&x}, out, [&] {
    return [x, out, p, mask = plan.mask, keepdim](const Tensor& g_in, InputGrads& gi) {
      const Tensor g = ops::in_dtype(g_in, x.dtype());
      if (!std::isfinite(p) && gi.create_graph()) {
        // g times sign(x) at the largest |x| (the kernel's choice among
        // ties): that factor is locally constant in x, so the product is
        // the whole gradient, as for max.
        Tensor chosen = empty(x.shape(), x.dtype(), x.device());
        backend::norm_grad(reduced_view(ones_like(out), x.shape(), mask, keepdim, false), x,
                           reduced_view(out, x.shape(), mask, keepdim, false), p, chosen);
        return gi.set(0, mul(expand_graph(g, x.shape(), mask), chosen));
      }
      if (gi.create_graph()) {
        // g sign(x) |x|^(p-1) / ||x||^(p-1), 0 where the norm is 0.
        const Tensor n = expand_graph(out, x.shape(), mask);
        const Tensor nonzero = gt(n, 0.0);
        const Tensor safe = where(nonzero, n, ones_like(n));
        const Tensor sign = where(gt(x, 0.0), ones_like(x), where(lt(x, 0.0), full_like(x, -1.0), zeros_like(x)));
        const Tensor num = p == 2.0 ? x : (p == 1.0 ? sign : mul(sign, pow(abs(x), p - 1.0)));
        const Tensor den = p == 2.0 ? safe : (p == 1.0 ? ones_like(safe) : pow(safe, p - 1.0));
        return gi.set(0, where(nonzero, div(mul(num, expand_graph(g, x.shape(), mask)), den), zeros_like(x)));
      }
      Tensor dx = empty(x.shape(), x.dtype(), x.device());
      backend::norm_grad(reduced_view(g, x.shape(), mask, keepdim, false), x,
                         reduced_view(out, x.shape(), mask, keepdim, false), p, dx);
      gi.set(0, dx);
    };
  });
  return out;
}

// prod's gradient is the product of the other elements of each line,
// computed by the backend as a prefix times a suffix product: g * prod / x
// would divide by zero where the line holds a zero, and a line with one zero
// has a nonzero gradient there.
Tensor prod(const Tensor& x_in, int dim, bool keepdim) {
  constexpr const char* op = "prod";
  ops::check_defined(op, {&x_in});
  ops::check_floating(op, x_in);
  const int d = normalize_axis(dim, std::max(x_in.ndim(), 1), op);
  Tensor x = x_in;
  amp::autocast_inputs(OpKind::prod, {&x});
  const backend::Axis3 a = backend::axis3(x.shape(), d);
  Shape out_shape;
  for (int k = 0; k < x.ndim(); ++k)
    if (k != d)
      out_shape.push_back(x.shape()[k]);
    else if (keepdim)
      out_shape.push_back(1);
  const Tensor xd = ops::dense(x);
  Tensor out = empty(out_shape, x.dtype(), x.device());
  backend::prod(xd, a, out);
  autodiff::record(OpKind::prod, {&x}, out, [a, x, xd] {
    return [a, x, xd](const Tensor& g, autodiff::InputGrads& gi) {
      if (gi.create_graph()) return gi.set(0, prod_grad_graph(g, x, a));
      Tensor dx = empty(xd.shape(), g.dtype(), g.device());
      backend::prod_grad(ops::dense(g, xd.dtype()), xd, a, dx);
      gi.set(0, dx);
    };
  });
  return out;
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  ops::check_defined("sum_to", {&x});
  if (x.shape() == shape) return x;
  const int lead = x.ndim() - shape.ndim();
  uint32_t mask = 0;
  bool ok = lead >= 0;
  for (int d = 0; ok && d < x.ndim(); ++d) {
    const int j = d - lead;
    if (j < 0) mask |= 1u << d;
    else if (shape[j] == 1 && x.shape()[d] != 1) mask |= 1u << d;
    else ok = shape[j] == x.shape()[d];
  }
  if (!ok) throw ShapeError("sum_to: cannot sum " + ops::describe(x) + " to " + to_string(shape));
  Tensor out = empty(shape, x.dtype(), x.device());
  backend::reduce(ReduceOp::sum, x, mask, out, {});
  autodiff::record(OpKind::sum, {&x}, out, [&] {
    return [xshape = x.shape()](const Tensor& g, InputGrads& gi) {
      (void)gi.create_graph();  // F:: ops: differentiable as written
      gi.set(0, broadcast_to(g, xshape));
    };
  });
  return out;
}

}  // namespace mixgrad::F
