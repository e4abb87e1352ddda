// F::cumsum and F::prod: ops along one axis, on the [outer, axis, inner]
// view of a contiguous input.
//
// cumsum's gradient is the reversed running sum of the output gradient.
// prod's is the product of the other elements of each line, computed as a
// prefix times a suffix product: g * prod / x would divide by zero where the
// line holds a zero, and a line with one zero has a nonzero gradient there.
#include "backend/indexing.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/reduction.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"
#include "ops/untracked_copy.hpp"

namespace mixgrad::F {

Tensor cumsum(const Tensor& x_in, int dim) {
  constexpr const char* op = "cumsum";
  ops::check_defined(op, {&x_in});
  ops::check_floating(op, x_in);
  const int d = normalize_axis(dim, std::max(x_in.ndim(), 1), op);
  Tensor x = x_in;
  amp::autocast_inputs(OpKind::cumsum, {&x});
  const backend::Axis3 a = backend::axis3(x.shape(), d);
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  backend::cumsum(ops::dense(x), a, false, out);
  ops::record_lazy(OpKind::cumsum, {&x}, out, [a] {
    return [a](const Tensor& g, autodiff::InputGrads& gi) {
      if (gi.create_graph()) {  // the reverse running sum, total - cumsum + g, as tracked ops
        const Tensor g3 = reshape(g, Shape{a.outer, a.axis, a.inner});
        return gi.set(0, reshape(add(sub(sum(g3, 1, true), cumsum(g3, 1)), g3), g.shape()));
      }
      Tensor dx = empty(g.shape(), g.dtype(), g.device());
      backend::cumsum(ops::dense(g), a, true, dx);
      gi.set(0, dx);
    };
  });
  return out;
}

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
  ops::record_lazy(OpKind::prod, {&x}, out, [a, x, xd] {
    return [a, x, xd](const Tensor& g, autodiff::InputGrads& gi) {
      if (gi.create_graph()) {
        // dx_i = g prod_{j != i} x_j, exact with zeros: a recorded prod over
        // n copies of x with x_i replaced by 1 ([outer, n, n, inner]).
        const Shape wide{a.outer, a.axis, a.axis, a.inner};
        const Tensor idx = arange(a.axis);
        const Tensor eye = reshape(eq(reshape(idx, Shape{a.axis, 1}), reshape(idx, Shape{1, a.axis})),
                                   Shape{1, a.axis, a.axis, 1})
                               .to(x.device());
        const Tensor xs = broadcast_to(reshape(x, Shape{a.outer, 1, a.axis, a.inner}), wide);
        const Tensor others = prod(where(broadcast_to(eye, wide), ones_like(xs), xs), 2);
        const Tensor g3 = reshape(g.dtype() == x.dtype() ? g : astype(g, x.dtype()), Shape{a.outer, 1, a.inner});
        return gi.set(0, reshape(mul(others, g3), x.shape()));
      }
      Tensor dx = empty(xd.shape(), g.dtype(), g.device());
      backend::prod_grad(ops::dense(g, xd.dtype()), xd, a, dx);
      gi.set(0, dx);
    };
  });
  return out;
}

}  // namespace mixgrad::F
