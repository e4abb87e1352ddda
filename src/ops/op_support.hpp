// Helpers every op uses: error text that names shapes and dtypes, checks,
// and the autocast hook. Ops follow one path:
//   validate -> amp::autocast_inputs -> backend kernel -> autodiff::record.
#pragma once

#include <initializer_list>
#include <span>
#include <string>

#include "hooks/autocast.hpp"
#include "hooks/tape.hpp"
#include "core/checks.hpp"
#include "mixgrad/tensor.hpp"
#include "core/op_table.hpp"

namespace mixgrad::ops {

// The checks live in core (every layer makes them); ops name them as their own.
using core::check_defined;
using core::check_floating;
using core::check_same_device;
using core::describe;

/// A product (matmul, linear, convolution) whose operands autocast left
/// mixed (amp::autocast_product_inputs returned `dtype`, its result's):
/// every defined operand must be `dtype` or float32.
inline void check_mixed_operands(const char* op, DType dtype, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->defined() && t->dtype() != dtype && t->dtype() != DType::float32)
      throw DTypeError(std::string(op) + ": under autocast to " + std::string(to_string(dtype)) + ", an operand is " +
                       describe(*t));
}

/// Writes `out = op(inputs)` on the tape, as autodiff::record, but builds the
/// closure with make() only when some recording GradManager tracks an
/// input: an op whose closure captures tensors pays nothing for them in
/// inference.
template <class Make>
void record_lazy(OpKind op, std::initializer_list<const Tensor*> inputs, const Tensor& out, Make&& make) {
  if (!autodiff::is_recording()) return;
  autodiff::record_with(op, std::span<const Tensor* const>(inputs.begin(), inputs.size()), out,
                        [&] { return autodiff::BackwardFn(make()); });
}

/// In a recorded backward (gi.create_graph()), for an op linear in its
/// input whose gradient kernel is linear in g alone (average pooling,
/// resampling): records `gx = kernel(g)` as a node on g whose own backward is
/// the op again (the kernel's adjoint), so the op is differentiable any
/// number of times. `forward(gg)` runs the op through F::.
template <class Forward>
void record_linear_grad(OpKind op, const Tensor& g, const Tensor& gx, Forward forward) {
  autodiff::record(op, {&g}, gx, [forward](const Tensor& gg, autodiff::InputGrads& gi) {
    (void)gi.create_graph();  // forward is an F:: op: recorded as any op
    gi.set(0, forward(gg));
  });
}

}  // namespace mixgrad::ops
