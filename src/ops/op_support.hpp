// What every op shares: the checks that name shapes and dtypes, the two
// hooks, the untracked copies its kernels read, and the recording helpers.
// Ops follow one path:
//   validate -> amp::autocast_inputs -> backend kernel -> autodiff::record.
//
// An untracked copy is a contiguous and / or converted copy of an input or
// of an incoming gradient made without a tape entry: an op that reads a
// strided input through one is still one node on the tape, whose input is
// the original tensor (Tensor::contiguous() or F::astype would add a node of
// their own).
//
//   const Tensor xd = ops::dense(x);                    // x itself when contiguous
//   const Tensor gd = ops::dense(g, DType::float32);    // also converted
//   const Tensor g2 = ops::in_dtype(g, x.dtype());      // converted only (g itself, any layout, if already x's dtype)
//   ops::overwrite(weight, loaded);                     // in place, for layers above ops (nn)
#pragma once

#include <initializer_list>
#include <span>
#include <string>

#include "backend/copy.hpp"
#include "hooks/op_hooks.hpp"
#include "core/checks.hpp"
#include "mixgrad/tensor.hpp"
#include "core/op_table.hpp"

namespace mixgrad::ops {

// The checks live in core (every layer makes them); ops name them as their own.
using core::check_defined;
using core::check_floating;
using core::check_same_device;
using core::describe;

/// t if it is contiguous and of `dtype`, else a contiguous converted copy.
inline Tensor dense(const Tensor& t, DType dtype) {
  if (t.is_contiguous() && t.dtype() == dtype) return t;
  Tensor c = empty(t.shape(), dtype, t.device());
  backend::copy(t, c);
  return c;
}

/// t if it is contiguous, else a contiguous copy.
inline Tensor dense(const Tensor& t) { return dense(t, t.dtype()); }

/// t if it is laid out densely in `format` and of `dtype`, else such a copy
/// (a 4-d operand of a kernel that reads channels-last as it lies).
inline Tensor dense(const Tensor& t, DType dtype, MemoryFormat format) {
  if (t.is_contiguous(format) && t.dtype() == dtype) return t;
  Tensor c = empty(t.shape(), dtype, t.device(), format);
  backend::copy(t, c);
  return c;
}

/// A new tensor of `shape` for an op's result, laid out in the memory format
/// of the first input of that shape (inputs broadcast to it do not count),
/// as PyTorch's elementwise ops keep a channels-last input's layout. Null
/// and undefined inputs are skipped.
inline Tensor empty_for(const Shape& shape, DType dtype, Device device, std::initializer_list<const Tensor*> inputs) {
  if (shape.ndim() < 4) return empty(shape, dtype, device);  // no channels-last format below 4-d
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->shape() == shape) return empty(shape, dtype, device, t->suggest_memory_format());
  return empty(shape, dtype, device);
}

/// t (any layout) if it has `dtype`, else a contiguous converted copy. For
/// gradients, which arrive in the output's dtype: this only guards.
inline Tensor in_dtype(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  return dense(t, dtype);
}

/// Writes src's values into dst in place (converted to dst's dtype, moved
/// from another device first), without a tape entry, and bumps dst's
/// version so what is cached on it (autocast's weight casts) is renewed:
/// loading a state dict, initialising a weight, appending to a KV cache.
inline void overwrite(const Tensor& dst, const Tensor& src) {
  autodiff::NoRecordScope no_record;  // src.to(device) of a tracked tensor is no op of the model
  backend::copy(src.device() == dst.device() ? src : src.to(dst.device()), dst);
  dst.bump_version();
}

/// Sets every element of dst to value, as overwrite does.
inline void overwrite(const Tensor& dst, double value) {
  backend::fill(dst, value);
  dst.bump_version();
}

/// A product (matmul, linear, convolution) whose operands autocast left
/// mixed (amp::autocast_product_inputs returned `dtype`, its result's):
/// every defined operand must be `dtype` or float32.
inline void check_mixed_operands(const char* op, DType dtype, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->defined() && t->dtype() != dtype && t->dtype() != DType::float32)
      throw DTypeError(std::string(op) + ": under autocast to " + std::string(to_string(dtype)) + ", an operand is " +
                       describe(*t));
}

/// In a recorded backward (gi.create_graph()), for an op linear in its
/// input whose gradient kernel is linear in g alone (average pooling,
/// resampling): records `gx = kernel(g)` as a node on g whose own backward is
/// the op again (the kernel's adjoint), so the op is differentiable any
/// number of times. `forward(gg)` runs the op through F::.
template <class Forward>
void record_linear_grad(OpKind op, const Tensor& g, const Tensor& gx, Forward forward) {
  autodiff::record(op, {&g}, gx, [&] {
    return [forward](const Tensor& gg, autodiff::InputGrads& gi) {
      (void)gi.create_graph();  // forward is an F:: op: recorded as any op
      gi.set(0, forward(gg));
    };
  });
}

}  // namespace mixgrad::ops
