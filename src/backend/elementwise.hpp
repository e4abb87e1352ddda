// Backend seam of the elementwise family: unary, binary, comparison and
// select kernels and the gradient kernels the backward passes need.
//
// Inputs broadcast to the output's shape (NumPy rules; the kernel reads a
// broadcast dimension with stride 0, no copy is made), have the output's
// dtype (comparisons: each other's; the caller promotes first) and may have
// any strides. An Operand is a tensor or a scalar, which is converted to the
// kernel's dtype.
//
//   Tensor out = empty(broadcast_shape, DType::float32);
//   backend::binary(BinaryOp::mul, Operand(a), Operand(2.0), out);
#pragma once

#include <cstdint>

#include "backend/dispatch.hpp"
#include "kernels/unary.hpp"

namespace mixgrad::backend {

using kernels::UnaryParams;

/// The unary kernels, in the order of core/unary_ops.def.
enum class UnaryOp : uint8_t {
#define MIXGRAD_UNARY_OP(name, functor, definition, cpu, cuda) name,
#define MIXGRAD_UNARY_KERNEL(name, op, functor) name,
#include "core/unary_ops.def"
#undef MIXGRAD_UNARY_OP
#undef MIXGRAD_UNARY_KERNEL
  kCount
};
/// The binary kernels, their gradient kernels (each over (g, x, y) as
/// core/binary_ops.def names them) and the comparisons, in that file's order.
enum class BinaryOp : uint8_t {
#define MIXGRAD_BINARY_OP(name, functor) name,
#include "core/binary_ops.def"
#undef MIXGRAD_BINARY_OP
  kCount
};
enum class BinaryGradOp : uint8_t {
#define MIXGRAD_BINARY_GRAD_OP(name, functor) name,
#include "core/binary_ops.def"
#undef MIXGRAD_BINARY_GRAD_OP
  kCount
};
enum class CompareOp : uint8_t {
#define MIXGRAD_COMPARE_OP(name, functor) name,
#include "core/binary_ops.def"
#undef MIXGRAD_COMPARE_OP
  kCount
};

/// One input of an elementwise kernel: a tensor or a scalar.
struct Operand {
  const Tensor* tensor = nullptr;
  double scalar = 0.0;
  Operand(const Tensor& t) : tensor(&t) {}  // NOLINT(google-explicit-constructor)
  Operand(double s) : scalar(s) {}          // NOLINT(google-explicit-constructor)
};

/// out = op(x) elementwise; x has out's shape and dtype.
MIXGRAD_STUB(unary, 2,
             void(UnaryOp op, const Tensor& x, const Tensor& out, const UnaryParams& params));  // on out's device
/// dx = grad * op'(...), from the tensor op's backward keeps (its input or its
/// output, see kernels/unary.hpp); all of dx's shape and dtype, a floating
/// one (integer tensors have no gradients).
MIXGRAD_STUB(unary_grad, 3,
             void(UnaryOp op, const Tensor& grad, const Tensor& saved, const Tensor& dx,
                  const UnaryParams& params));  // on dx's device
/// out = op(a, b) with broadcasting.
MIXGRAD_STUB(binary, 3, void(BinaryOp op, const Operand& a, const Operand& b, const Tensor& out));  // on out's device
/// dx = op's partial derivative applied to grad (see BinaryGradOp), in the
/// broadcast shape of dx.
MIXGRAD_STUB(binary_grad, 4,
             void(BinaryGradOp op, const Tensor& grad, const Operand& x, const Operand& y,
                  const Tensor& dx));  // on dx's device
/// out (bool) = a op b with broadcasting; a and b share a dtype.
MIXGRAD_STUB(compare, 3, void(CompareOp op, const Operand& a, const Operand& b, const Tensor& out));  // on out's device
/// out = cond ? a : b with broadcasting; cond is bool.
MIXGRAD_STUB(where, 3,
             void(const Tensor& cond, const Operand& a, const Operand& b, const Tensor& out));  // on out's device

}  // namespace mixgrad::backend
