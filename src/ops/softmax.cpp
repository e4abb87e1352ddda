// F::softmax and F::log_softmax along any axis. Autocast runs them in high
// precision (float32); without autocast a 16-bit input gives a 16-bit output
// computed in float. The backward closure keeps only the output.
#include "backend/softmax.hpp"

#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/nn.hpp"
#include "mixgrad/ops/reduction.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

Tensor softmax_op(const char* op, OpKind kind_of_op, backend::SoftmaxKind kind, const Tensor& x_in, int axis) {
  ops::check_defined(op, {&x_in});
  ops::check_floating(op, x_in);
  // A 0-d tensor is one element along its only (implicit) axis.
  const int a = normalize_axis(axis, std::max(x_in.ndim(), 1), op);
  Tensor x = x_in;
  amp::autocast_inputs(kind_of_op, {&x});
  backend::SoftmaxShape s;
  if (x.ndim() > 0) {
    for (int d = 0; d < a; ++d) s.outer *= x.shape()[d];
    s.axis = x.shape()[a];
    for (int d = a + 1; d < x.ndim(); ++d) s.inner *= x.shape()[d];
  }
  Tensor y = empty(x.shape(), x.dtype(), x.device());
  backend::softmax_forward(ops::dense(x), y, s, kind);
  autodiff::record(kind_of_op, {&x}, y, [&] {
    return [y, s, kind, a](const Tensor& g, autodiff::InputGrads& gi) {
      if (gi.create_graph()) {                               // tracked: y (g - sum(g y)) and g - e^y sum(g)
        if (y.ndim() == 0) return gi.set(0, zeros_like(g));  // one element: the output is constant
        if (kind == backend::SoftmaxKind::softmax) return gi.set(0, mul(y, sub(g, sum(mul(g, y), a, true))));
        return gi.set(0, sub(g, mul(exp(y), sum(g, a, true))));
      }
      Tensor gx = empty(y.shape(), y.dtype(), y.device());
      backend::softmax_backward(ops::dense(g, y.dtype()), y, gx, s, kind);
      gi.set(0, gx);
    };
  });
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x, int axis) {
  return softmax_op("softmax", OpKind::softmax, backend::SoftmaxKind::softmax, x, axis);
}

Tensor log_softmax(const Tensor& x, int axis) {
  return softmax_op("log_softmax", OpKind::log_softmax, backend::SoftmaxKind::log_softmax, x, axis);
}

}  // namespace mixgrad::F
