// F::cumsum: a running sum along one axis, on the [outer, axis, inner] view
// of a contiguous input. Its gradient is the reversed running sum of the
// output gradient.
#include "mixgrad/ops/scan.hpp"

#include <algorithm>

#include "backend/scan.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/reduction.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"

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
  autodiff::record(OpKind::cumsum, {&x}, out, [a] {
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

}  // namespace mixgrad::F
