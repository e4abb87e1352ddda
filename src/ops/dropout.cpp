// F::dropout. The mask is drawn from the global counter-based generator: the
// call reserves one Philox block per 4 elements, and element i's fate depends
// only on (seed, first counter, i). The backward reruns the same kernel on
// the gradient with the same counters, so no mask is stored and the result
// is the same on any number of threads.
#include <cmath>
#include <string>

#include "backend/dropout.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/nn.hpp"
#include "ops/op_support.hpp"
#include "core/random_state.hpp"

namespace mixgrad::F {

Tensor dropout(const Tensor& x_in, double p, bool training) {
  ops::check_defined("dropout", {&x_in});
  ops::check_floating("dropout", x_in);
  if (!(p >= 0.0 && p < 1.0))
    throw ValueError("dropout: p must be in [0, 1), got " + std::to_string(p) + " for input " + ops::describe(x_in));
  if (!training || p == 0.0) return x_in;

  Tensor x = x_in;
  amp::autocast_inputs(OpKind::dropout, {&x});
  const int64_t n = x.numel();
  backend::DropoutParams params;
  params.mask.seed = random_state::seed();
  params.mask.first = random_state::reserve(kernels::DropoutMask::counters(n));
  params.mask.threshold = static_cast<uint64_t>(std::llround(std::ldexp(p, 32)));
  params.scale = 1.0 / (1.0 - p);
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  backend::dropout_apply(ops::dense(x), out, params);
  autodiff::record(OpKind::dropout, {&x}, out, [&] {
    return [params](const Tensor& g, autodiff::InputGrads& gi) {
      if (gi.create_graph()) {  // g times the step's mask (scaled), drawn again from its seed
        Tensor mask = empty(g.shape(), g.dtype(), g.device());
        backend::dropout_apply(ones(g.shape(), g.dtype(), g.device()), mask, params);
        return gi.set(0, mul(g, mask));
      }
      Tensor grad = empty(g.shape(), g.dtype(), g.device());
      backend::dropout_apply(ops::dense(g), grad, params);
      gi.set(0, grad);
    };
  });
  return out;
}

}  // namespace mixgrad::F
