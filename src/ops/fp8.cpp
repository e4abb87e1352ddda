// F::fp8_round and F::fp8_quantize: the FP8 cast of backend/fp8.hpp as ops,
// recorded with straight-through gradients. They are not rows of the op
// table (autocast leaves them alone; amp's FP8 products call them with the
// dtypes they want), so their tape nodes name themselves.
#include "mixgrad/ops/fp8.hpp"

#include "backend/fp8.hpp"
#include "hooks/op_hooks.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

kernels::Fp8Params params(Fp8Format f) { return f == Fp8Format::e4m3 ? kernels::kE4M3 : kernels::kE5M2; }

void check_scale(const char* op, const Tensor& x, const Tensor& scale) {
  if (!scale.defined()) throw StateError(std::string(op) + ": scale is undefined (for " + ops::describe(x) + ")");
  if (scale.numel() != 1)
    throw ShapeError(std::string(op) + ": scale must hold one element, got " + ops::describe(scale));
  if (scale.dtype() != DType::float32)
    throw DTypeError(std::string(op) + ": scale must be float32, got " + ops::describe(scale));
  if (scale.device() != x.device())
    throw DeviceError(std::string(op) + ": scale " + ops::describe(scale) + " is not on the device of " +
                      ops::describe(x));
}

// out = round(x * scale) recorded with the gradient g (* scale): the rounding
// is the identity for the tape.
Tensor cast(const char* op, const Tensor& x, const Tensor& scale, Fp8Format format, DType dtype) {
  Tensor out = empty(x.shape(), dtype, x.device());
  backend::fp8_quantize(x, out, scale, params(format));
  autodiff::record(OpKind::kCount, {&x}, out, [&] {
    return [op, scale, dtype = x.dtype()](const Tensor& g, autodiff::InputGrads& gi) {
      gi.name_op(op);
      Tensor gx = scale.defined() ? F::mul(g, scale) : g;
      gi.set(0, gx.dtype() == dtype ? gx : F::astype(gx, dtype));
    };
  });
  return out;
}

}  // namespace

Tensor fp8_round(const Tensor& x, Fp8Format format) {
  ops::check_defined("fp8_round", {&x});
  ops::check_floating("fp8_round", x);
  return cast("fp8_round", x, Tensor(), format, x.dtype());
}

Tensor fp8_quantize(const Tensor& x, const Tensor& scale, Fp8Format format) {
  ops::check_defined("fp8_quantize", {&x});
  ops::check_floating("fp8_quantize", x);
  check_scale("fp8_quantize", x, scale);
  return cast("fp8_quantize", x, scale, format, DType::float32);
}

}  // namespace mixgrad::F
