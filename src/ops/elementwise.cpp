// Elementwise ops and their gradients.
//
// Every op takes the one path: validate (errors name the op, the shapes and
// the dtypes) -> autocast -> promote mixed dtypes with a recorded astype, so
// gradients flow back to each input in its own dtype -> backend kernel ->
// record. Recording goes through autodiff::record: the backward closure (and the
// reference counts of what it captures) is only built when a GradManager
// tracks an input, so inference pays nothing for autodiff.
//
// Backward closures call the backend directly rather than F:: ops: they
// need no validation, and autocast must not re-cast gradients when backward
// runs inside an autocast scope. When the backward is itself recorded
// (gi.create_graph(): higher-order gradients) they take a second path written
// with F:: ops on the saved tensors, so every gradient here is differentiable
// again; the walk turns autocast off for it. A unary op's second path is its
// functor's own derivative run on Tensors (kernels/unary.hpp): one formula
// for both paths.
#include "mixgrad/ops/elementwise.hpp"

#include <array>
#include <cmath>

#include "backend/elementwise.hpp"
#include "core/sizes.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/reduction.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"

// The functions of kernels::math on Tensors: the unary ops' derivatives
// (kernels/unary.hpp) run on these in a recorded backward, so each step is a
// recorded F:: op and the gradient is differentiable again.
namespace mixgrad::kernels::math {
template <>
struct TensorOps<Tensor> {
  static Tensor select(const Tensor& cond, const Tensor& a, const Tensor& b) { return F::where(cond, a, b); }
  static Tensor select(const Tensor& cond, const Tensor& a, double b) { return F::where(cond, a, full_like(a, b)); }
  static Tensor select(const Tensor& cond, double a, const Tensor& b) { return F::where(cond, full_like(b, a), b); }
  static Tensor exp(const Tensor& x) { return F::exp(x); }
  static Tensor erf(const Tensor& x) { return F::erf(x); }
  static Tensor sin(const Tensor& x) { return F::sin(x); }
  static Tensor cos(const Tensor& x) { return F::cos(x); }
  static Tensor tanh(const Tensor& x) { return F::tanh(x); }
  static Tensor sigmoid(const Tensor& x) { return F::sigmoid(x); }
};
}  // namespace mixgrad::kernels::math

namespace mixgrad::F {

namespace {

using autodiff::InputGrads;
using backend::BinaryGradOp;
using backend::BinaryOp;
using backend::CompareOp;
using backend::Operand;
using backend::UnaryOp;
using backend::UnaryParams;
using kernels::Saved;

/// Which dtypes an op takes.
enum class Accepts : uint8_t {
  floating,  // float16, bfloat16, float32, float64
  numeric,   // and int8, uint8, int32, int64
  any,       // and bool
};

bool accepted(DType t, Accepts accepts) {
  return is_floating_point(t) || accepts == Accepts::any || (accepts == Accepts::numeric && t != DType::bool_);
}

/// The DTypeError for operands (already described) an op does not take.
[[noreturn]] void throw_not_accepted(const char* op, Accepts accepts, const std::string& operands) {
  const char* wanted = accepts == Accepts::numeric ? "numeric (floating or integer)" : "floating";
  throw DTypeError(std::string(op) + ": expected " + wanted + " tensors, got " + operands);
}

Shape broadcast_or_throw(const char* op, const Tensor& a, const Tensor& b) {
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  if (sa == sb) return sa;
  const int n = std::max(sa.ndim(), sb.ndim());
  Shape out;
  for (int i = 0; i < n; ++i) {
    const int ia = i - (n - sa.ndim()), ib = i - (n - sb.ndim());
    const int64_t da = ia >= 0 ? sa[ia] : 1, db = ib >= 0 ? sb[ib] : 1;
    if (da != db && da != 1 && db != 1)
      throw ShapeError(std::string(op) + ": cannot broadcast " + ops::describe(a) + " with " + ops::describe(b));
    out.push_back(da == 1 ? db : da);
  }
  sizes::numel(out, op);  // empty operands can broadcast to a shape too large to count
  return out;
}

// ---- raw kernels (no checks, no autocast, no recording) --------------------

Tensor run_binary(BinaryOp op, const Operand& a, const Operand& b, const Shape& shape, DType dtype, Device device) {
  Tensor out = ops::empty_for(shape, dtype, device, {a.tensor, b.tensor});
  backend::binary(op, a, b, out);
  return out;
}

/// g op y, in g's shape and dtype (y broadcasts to g).
Tensor grad_binary(BinaryOp op, const Tensor& g, const Operand& y) {
  return run_binary(op, g, y, g.shape(), g.dtype(), g.device());
}

Tensor grad_kernel(BinaryGradOp op, const Tensor& g, const Operand& x, const Operand& y) {
  Tensor dx = ops::empty_for(g.shape(), g.dtype(), g.device(), {&g});
  backend::binary_grad(op, g, x, y, dx);
  return dx;
}

Tensor negated(const Tensor& g) {
  Tensor out = ops::empty_for(g.shape(), g.dtype(), g.device(), {&g});
  backend::unary(UnaryOp::neg, g, out, {});
  return out;
}

// ---- recorded (differentiable) gradients: F:: ops only ----------------------

/// g where `keep`, else 0.
Tensor masked(const Tensor& keep, const Tensor& g) { return where(keep, g, zeros_like(g)); }

/// maximum / minimum's gradient for `self` against `other` (a tensor or a
/// scalar) as a tracked op: all of g where self wins, half of it on a tie
/// (the kernel's rule).
template <class Other>
Tensor max_min_graph(BinaryGradOp op, const Tensor& g, const Tensor& self, const Other& other) {
  const Tensor wins = op == BinaryGradOp::maximum ? gt(self, other) : lt(self, other);
  return where(wins, g, masked(eq(self, other), mul(g, 0.5)));
}

// ---- binary ----------------------------------------------------------------

struct BinarySpec {
  const char* name;
  OpKind kind;
  Accepts accepts;
};

/// Validated, autocast and promoted inputs of a binary op.
struct BinaryInputs {
  Tensor a, b;
  Shape shape;
  DType dtype;
};

BinaryInputs prepare(const BinarySpec& s, const Tensor& a, const Tensor& b) {
  ops::check_defined(s.name, {&a, &b});
  ops::check_same_device(s.name, {&a, &b});
  Shape shape = broadcast_or_throw(s.name, a, b);
  if (!accepted(promote_types(a.dtype(), b.dtype()), s.accepts))
    throw_not_accepted(s.name, s.accepts, ops::describe(a) + " and " + ops::describe(b));
  BinaryInputs in{a, b, shape, DType::float32};
  amp::autocast_inputs(s.kind, {&in.a, &in.b});
  in.dtype = promote_types(in.a.dtype(), in.b.dtype());
  if (in.a.dtype() != in.dtype) in.a = astype(in.a, in.dtype);
  if (in.b.dtype() != in.dtype) in.b = astype(in.b, in.dtype);
  return in;
}

/// A tensor-with-scalar op's validated, autocast input.
Tensor prepare(const BinarySpec& s, const Tensor& a) {
  ops::check_defined(s.name, {&a});
  if (!accepted(a.dtype(), s.accepts)) throw_not_accepted(s.name, s.accepts, ops::describe(a) + " and a scalar");
  Tensor x = a;
  amp::autocast_inputs(s.kind, {&x});
  return x;
}

constexpr BinarySpec kAdd{"add", OpKind::add, Accepts::numeric};
constexpr BinarySpec kSub{"sub", OpKind::sub, Accepts::numeric};
constexpr BinarySpec kMul{"mul", OpKind::mul, Accepts::numeric};
constexpr BinarySpec kDiv{"div", OpKind::div, Accepts::floating};
constexpr BinarySpec kPow{"pow", OpKind::pow, Accepts::floating};
constexpr BinarySpec kMaximum{"maximum", OpKind::maximum, Accepts::numeric};
constexpr BinarySpec kMinimum{"minimum", OpKind::minimum, Accepts::numeric};

Tensor forward(BinaryOp op, const BinaryInputs& in) {
  return run_binary(op, in.a, in.b, in.shape, in.dtype, in.a.device());
}

Tensor max_min(const BinarySpec& s, BinaryOp op, BinaryGradOp grad_op, const Tensor& a, const Tensor& b) {
  BinaryInputs in = prepare(s, a, b);
  Tensor out = forward(op, in);
  autodiff::record(s.kind, {&in.a, &in.b}, out, [&] {
    return [a = in.a, b = in.b, grad_op](const Tensor& g_in, InputGrads& gi) {
      const Tensor g = ops::in_dtype(g_in, a.dtype());
      if (gi.create_graph()) {
        if (gi.needs(0)) gi.set(0, sum_to(max_min_graph(grad_op, g, a, b), a.shape()));
        if (gi.needs(1)) gi.set(1, sum_to(max_min_graph(grad_op, g, b, a), b.shape()));
        return;
      }
      if (gi.needs(0)) gi.set(0, sum_to(grad_kernel(grad_op, g, a, b), a.shape()));
      if (gi.needs(1)) gi.set(1, sum_to(grad_kernel(grad_op, g, b, a), b.shape()));
    };
  });
  return out;
}

Tensor max_min(const BinarySpec& s, BinaryOp op, BinaryGradOp grad_op, const Tensor& a, double b) {
  const Tensor x = prepare(s, a);
  Tensor out = run_binary(op, x, b, x.shape(), x.dtype(), x.device());
  autodiff::record(s.kind, {&x}, out, [&] {
    return [x, b, grad_op](const Tensor& g, InputGrads& gi) {
      if (gi.create_graph()) {
        gi.set(0, max_min_graph(grad_op, g, x, b));
        return;
      }
      gi.set(0, grad_kernel(grad_op, ops::in_dtype(g, x.dtype()), x, b));
    };
  });
  return out;
}

// ---- comparisons -----------------------------------------------------------

Tensor compare(const char* name, CompareOp op, const Tensor& a, const Tensor& b) {
  BinaryInputs in = prepare({name, OpKind::compare, Accepts::any}, a, b);
  Tensor out = ops::empty_for(in.shape, DType::bool_, in.a.device(), {&in.a, &in.b});
  backend::compare(op, in.a, in.b, out);
  return out;
}

Tensor compare(const char* name, CompareOp op, const Tensor& a, double b) {
  const Tensor x = prepare({name, OpKind::compare, Accepts::any}, a);
  Tensor out = ops::empty_for(x.shape(), DType::bool_, x.device(), {&x});
  backend::compare(op, x, b, out);
  return out;
}

// ---- unary -----------------------------------------------------------------

/// A recorded backward's gradient of a unary op: its functor's derivative
/// on Tensors (see kernels/unary.hpp), each operation a recorded F:: op.
using RecordedGrad = Tensor (*)(const Tensor& g, const Tensor& saved, const UnaryParams& params);

template <template <class> class Fn>
Tensor recorded_grad(const Tensor& g, const Tensor& saved, const UnaryParams& params) {
  return kernels::make_unary<Fn, double>(params).grad(g, saved);
}

struct UnarySpec {
  const char* name;
  OpKind kind;
  UnaryOp op;
  Saved saved;
  Accepts accepts;
  RecordedGrad grad;
};

/// The spec of the op `kind` (kernel `op`), computed by functor Fn.
template <template <class> class Fn>
constexpr UnarySpec unary_spec(const char* name, OpKind kind, UnaryOp op) {
  using Functor = Fn<double>;
  const Accepts accepts = Functor::kIntegers ? Accepts::numeric : Accepts::floating;
  return {name, kind, op, Functor::kSaved, accepts, &recorded_grad<Fn>};
}

Tensor unary(const UnarySpec& s, const Tensor& x_in, const UnaryParams& params = {}) {
  ops::check_defined(s.name, {&x_in});
  if (!accepted(x_in.dtype(), s.accepts)) throw_not_accepted(s.name, s.accepts, ops::describe(x_in));
  Tensor x = x_in;
  amp::autocast_inputs(s.kind, {&x});
  Tensor out = ops::empty_for(x.shape(), x.dtype(), x.device(), {&x});
  backend::unary(s.op, x, out, params);
  autodiff::record(s.kind, {&x}, out, [&] {
    // Keep only the tensor the derivative reads; `nothing` (neg) reads g.
    Tensor saved = s.saved == Saved::output ? out : (s.saved == Saved::input ? x : Tensor());
    return [op = s.op, grad = s.grad, saved = std::move(saved), params](const Tensor& g_in, InputGrads& gi) {
      if (gi.create_graph()) {
        gi.set(0, grad(g_in, saved, params));
        return;
      }
      const Tensor g = saved.defined() ? ops::in_dtype(g_in, saved.dtype()) : g_in;
      Tensor dx = ops::empty_for(g.shape(), g.dtype(), g.device(), {&g});
      backend::unary_grad(op, g, saved.defined() ? saved : g, dx, params);
      gi.set(0, dx);
    };
  });
  return out;
}

/// Every UnaryOp's spec, in the enum's order: generated from unary_ops.def.
/// A second kernel of an op (gelu_tanh) is named and autocast as that op.
constexpr std::array kUnarySpecs{
#define MIXGRAD_UNARY_OP(name, functor, definition, cpu, cuda) \
  unary_spec<kernels::functor>(#name, OpKind::name, UnaryOp::name),
#define MIXGRAD_UNARY_KERNEL(name, op, functor) unary_spec<kernels::functor>(#op, OpKind::op, UnaryOp::name),
#include "core/unary_ops.def"
#undef MIXGRAD_UNARY_OP
#undef MIXGRAD_UNARY_KERNEL
};
static_assert(kUnarySpecs.size() == static_cast<size_t>(UnaryOp::kCount), "one spec per UnaryOp");

Tensor unary(UnaryOp op, const Tensor& x, const UnaryParams& params = {}) {
  return unary(kUnarySpecs[static_cast<size_t>(op)], x, params);
}

/// An op taking bounds lo <= hi (clamp, hardtanh), passed as the functor's alpha and beta.
Tensor bounded(UnaryOp op, const Tensor& x, double lo, double hi) {
  if (!(lo <= hi))
    throw ValueError(std::string(kUnarySpecs[static_cast<size_t>(op)].name) + ": lower bound " +
                     std::to_string(lo) + " is not <= upper bound " + std::to_string(hi) + " (for " +
                     (x.defined() ? ops::describe(x) : std::string("undefined")) + ")");
  return unary(op, x, {.alpha = lo, .beta = hi});
}

}  // namespace

// ---- binary ops --------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b) {
  BinaryInputs in = prepare(kAdd, a, b);
  Tensor out = forward(BinaryOp::add, in);
  autodiff::record(OpKind::add, {&in.a, &in.b}, out, [&] {
    return [sa = in.a.shape(), sb = in.b.shape()](const Tensor& g, InputGrads& gi) {
      (void)gi.create_graph();  // sum_to is a tracked op: the same code serves both paths
      if (gi.needs(0)) gi.set(0, sum_to(g, sa));
      if (gi.needs(1)) gi.set(1, sum_to(g, sb));
    };
  });
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  BinaryInputs in = prepare(kSub, a, b);
  Tensor out = forward(BinaryOp::sub, in);
  autodiff::record(OpKind::sub, {&in.a, &in.b}, out, [&] {
    return [sa = in.a.shape(), sb = in.b.shape()](const Tensor& g, InputGrads& gi) {
      // Asked whatever input needs a gradient: sum_to and neg are F:: ops,
      // recorded in a recorded backward, so both gradients are differentiable.
      const bool graph = gi.create_graph();
      if (gi.needs(0)) gi.set(0, sum_to(g, sa));
      if (gi.needs(1)) gi.set(1, graph ? neg(sum_to(g, sb)) : negated(sum_to(g, sb)));
    };
  });
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  BinaryInputs in = prepare(kMul, a, b);
  Tensor out = forward(BinaryOp::mul, in);
  autodiff::record(OpKind::mul, {&in.a, &in.b}, out, [&] {
    return [a = in.a, b = in.b](const Tensor& g_in, InputGrads& gi) {
      const Tensor g = ops::in_dtype(g_in, a.dtype());
      if (gi.create_graph()) {
        if (gi.needs(0)) gi.set(0, sum_to(mul(g, b), a.shape()));
        if (gi.needs(1)) gi.set(1, sum_to(mul(g, a), b.shape()));
        return;
      }
      if (gi.needs(0)) gi.set(0, sum_to(grad_binary(BinaryOp::mul, g, b), a.shape()));
      if (gi.needs(1)) gi.set(1, sum_to(grad_binary(BinaryOp::mul, g, a), b.shape()));
    };
  });
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  BinaryInputs in = prepare(kDiv, a, b);
  Tensor out = forward(BinaryOp::div, in);
  autodiff::record(OpKind::div, {&in.a, &in.b}, out, [&] {
    return [sa = in.a.shape(), b = in.b, out](const Tensor& g_in, InputGrads& gi) {
      const Tensor g = ops::in_dtype(g_in, b.dtype());
      if (gi.create_graph()) {
        if (gi.needs(0)) gi.set(0, sum_to(div(g, b), sa));
        if (gi.needs(1)) gi.set(1, sum_to(neg(div(mul(g, out), b)), b.shape()));
        return;
      }
      if (gi.needs(0)) gi.set(0, sum_to(grad_binary(BinaryOp::div, g, b), sa));
      if (gi.needs(1)) gi.set(1, sum_to(grad_kernel(BinaryGradOp::div_divisor, g, b, out), b.shape()));
    };
  });
  return out;
}

Tensor pow(const Tensor& a, const Tensor& b) {
  BinaryInputs in = prepare(kPow, a, b);
  Tensor out = forward(BinaryOp::pow, in);
  autodiff::record(OpKind::pow, {&in.a, &in.b}, out, [&] {
    return [a = in.a, b = in.b, out](const Tensor& g_in, InputGrads& gi) {
      const Tensor g = ops::in_dtype(g_in, a.dtype());
      if (gi.create_graph()) {
        if (gi.needs(0)) gi.set(0, sum_to(mul(g, mul(b, pow(a, sub(b, 1.0)))), a.shape()));
        if (gi.needs(1)) gi.set(1, sum_to(masked(ne(out, 0.0), mul(mul(g, out), log(a))), b.shape()));
        return;
      }
      if (gi.needs(0)) gi.set(0, sum_to(grad_kernel(BinaryGradOp::pow_base, g, a, b), a.shape()));
      if (gi.needs(1)) gi.set(1, sum_to(grad_kernel(BinaryGradOp::pow_exponent, g, a, out), b.shape()));
    };
  });
  return out;
}

Tensor maximum(const Tensor& a, const Tensor& b) { return max_min(kMaximum, BinaryOp::maximum, BinaryGradOp::maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return max_min(kMinimum, BinaryOp::minimum, BinaryGradOp::minimum, a, b); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  ops::check_defined("where", {&cond, &a, &b});
  ops::check_same_device("where", {&cond, &a, &b});
  if (cond.dtype() != DType::bool_)
    throw DTypeError("where: the condition must be a bool tensor, got " + ops::describe(cond));
  Shape shape;
  try {
    shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  } catch (const ShapeError&) {
    throw ShapeError("where: cannot broadcast condition " + ops::describe(cond) + " with " + ops::describe(a) +
                     " and " + ops::describe(b));
  }
  Tensor ta = a, tb = b;
  amp::autocast_inputs(OpKind::where, {&ta, &tb});
  const DType dtype = promote_types(ta.dtype(), tb.dtype());
  if (ta.dtype() != dtype) ta = astype(ta, dtype);
  if (tb.dtype() != dtype) tb = astype(tb, dtype);
  Tensor out = ops::empty_for(shape, dtype, ta.device(), {&ta, &tb, &cond});
  backend::where(cond, ta, tb, out);
  autodiff::record(OpKind::where, {&ta, &tb}, out, [&] {
    return [cond, sa = ta.shape(), sb = tb.shape()](const Tensor& g, InputGrads& gi) {
      if (gi.create_graph()) {
        if (gi.needs(0)) gi.set(0, sum_to(where(cond, g, zeros_like(g)), sa));
        if (gi.needs(1)) gi.set(1, sum_to(where(cond, zeros_like(g), g), sb));
        return;
      }
      for (size_t i = 0; i < 2; ++i) {
        if (!gi.needs(i)) continue;
        Tensor masked = ops::empty_for(g.shape(), g.dtype(), g.device(), {&g});
        if (i == 0) backend::where(cond, g, 0.0, masked);
        else backend::where(cond, 0.0, g, masked);
        gi.set(i, sum_to(masked, i == 0 ? sa : sb));
      }
    };
  });
  return out;
}

// ---- scalar forms ------------------------------------------------------------

Tensor add(const Tensor& a, double b) {
  const Tensor x = prepare(kAdd, a);
  Tensor out = run_binary(BinaryOp::add, x, b, x.shape(), x.dtype(), x.device());
  autodiff::record(OpKind::add, {&x}, out, [&] {
    return [](const Tensor& g, InputGrads& gi) {
      (void)gi.create_graph();  // the identity: differentiable as it is
      gi.set(0, g);
    };
  });
  return out;
}

Tensor sub(const Tensor& a, double b) {
  const Tensor x = prepare(kSub, a);
  Tensor out = run_binary(BinaryOp::sub, x, b, x.shape(), x.dtype(), x.device());
  autodiff::record(OpKind::sub, {&x}, out, [&] {
    return [](const Tensor& g, InputGrads& gi) {
      (void)gi.create_graph();  // the identity: differentiable as it is
      gi.set(0, g);
    };
  });
  return out;
}

Tensor sub(double a, const Tensor& b) {
  const Tensor x = prepare(kSub, b);
  Tensor out = run_binary(BinaryOp::sub, a, x, x.shape(), x.dtype(), x.device());
  autodiff::record(OpKind::sub, {&x}, out, [&] {
    return [](const Tensor& g, InputGrads& gi) { gi.set(0, gi.create_graph() ? neg(g) : negated(g)); };
  });
  return out;
}

Tensor mul(const Tensor& a, double b) {
  const Tensor x = prepare(kMul, a);
  Tensor out = run_binary(BinaryOp::mul, x, b, x.shape(), x.dtype(), x.device());
  autodiff::record(OpKind::mul, {&x}, out, [&] {
    return [b](const Tensor& g, InputGrads& gi) {
      gi.set(0, gi.create_graph() ? mul(g, b) : grad_binary(BinaryOp::mul, g, b));
    };
  });
  return out;
}

Tensor div(const Tensor& a, double b) {
  const Tensor x = prepare(kDiv, a);
  Tensor out = run_binary(BinaryOp::div, x, b, x.shape(), x.dtype(), x.device());
  autodiff::record(OpKind::div, {&x}, out, [&] {
    return [b](const Tensor& g, InputGrads& gi) {
      gi.set(0, gi.create_graph() ? div(g, b) : grad_binary(BinaryOp::div, g, b));
    };
  });
  return out;
}

Tensor div(double a, const Tensor& b) {
  const Tensor x = prepare(kDiv, b);
  Tensor out = run_binary(BinaryOp::div, a, x, x.shape(), x.dtype(), x.device());
  autodiff::record(OpKind::div, {&x}, out, [&] {
    return [x, out](const Tensor& g, InputGrads& gi) {
      if (gi.create_graph()) return gi.set(0, neg(div(mul(g, out), x)));
      gi.set(0, grad_kernel(BinaryGradOp::div_divisor, ops::in_dtype(g, x.dtype()), x, out));
    };
  });
  return out;
}

// x^2, the common case (squared errors, penalties, variances), runs as x * x
// and its gradient as g * (2 x): correctly rounded (2 x is exact), in
// vectorised loops, where libm's powf per element was up to an ulp off and
// 18 times slower.
Tensor pow(const Tensor& a, double exponent) {
  const Tensor x = prepare(kPow, a);
  const bool square = exponent == 2.0;
  Tensor out = square ? run_binary(BinaryOp::mul, x, x, x.shape(), x.dtype(), x.device())
                      : run_binary(BinaryOp::pow, x, exponent, x.shape(), x.dtype(), x.device());
  autodiff::record(OpKind::pow, {&x}, out, [&] {
    return [x, exponent, square](const Tensor& g_in, InputGrads& gi) {
      if (gi.create_graph()) return gi.set(0, mul(g_in, mul(pow(x, exponent - 1.0), exponent)));
      const Tensor g = ops::in_dtype(g_in, x.dtype());
      if (square) {
        const Tensor two_x = run_binary(BinaryOp::mul, x, 2.0, x.shape(), x.dtype(), x.device());
        return gi.set(0, grad_binary(BinaryOp::mul, g, two_x));
      }
      gi.set(0, grad_kernel(BinaryGradOp::pow_base, g, x, exponent));
    };
  });
  return out;
}

Tensor maximum(const Tensor& a, double b) { return max_min(kMaximum, BinaryOp::maximum, BinaryGradOp::maximum, a, b); }
Tensor minimum(const Tensor& a, double b) { return max_min(kMinimum, BinaryOp::minimum, BinaryGradOp::minimum, a, b); }

// ---- comparisons ---------------------------------------------------------------

// The F:: comparisons, from core/binary_ops.def: against a tensor and a scalar.
#define MIXGRAD_COMPARE_OP(name, functor)                                                          \
  Tensor name(const Tensor& a, const Tensor& b) { return compare(#name, CompareOp::name, a, b); } \
  Tensor name(const Tensor& a, double b) { return compare(#name, CompareOp::name, a, b); }
#include "core/binary_ops.def"
#undef MIXGRAD_COMPARE_OP

// ---- unary ops -------------------------------------------------------------------

// The F:: functions of the unary_ops.def lines marked `generated` and
// `bounds`; the `written` ones follow.
#define MIXGRAD_UNARY_DEFINE_generated(name) \
  Tensor name(const Tensor& x) { return unary(UnaryOp::name, x); }
#define MIXGRAD_UNARY_DEFINE_bounds(name) \
  Tensor name(const Tensor& x, double lo, double hi) { return bounded(UnaryOp::name, x, lo, hi); }
#define MIXGRAD_UNARY_DEFINE_written(name)
#define MIXGRAD_UNARY_OP(name, functor, definition, cpu, cuda) MIXGRAD_UNARY_DEFINE_##definition(name)
#define MIXGRAD_UNARY_KERNEL(name, op, functor)
#include "core/unary_ops.def"
#undef MIXGRAD_UNARY_OP
#undef MIXGRAD_UNARY_KERNEL
#undef MIXGRAD_UNARY_DEFINE_generated
#undef MIXGRAD_UNARY_DEFINE_bounds
#undef MIXGRAD_UNARY_DEFINE_written

Tensor leaky_relu(const Tensor& x, double negative_slope) {
  return unary(UnaryOp::leaky_relu, x, {.alpha = negative_slope});
}

Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  return unary(approximate == GeluApproximation::tanh ? UnaryOp::gelu_tanh : UnaryOp::gelu, x);
}

Tensor softplus(const Tensor& x, double beta, double threshold) {
  if (!std::isfinite(beta) || beta == 0.0 || std::isnan(threshold))
    throw ValueError("softplus: beta must be finite and nonzero and threshold not NaN, got beta=" +
                     std::to_string(beta) + " threshold=" + std::to_string(threshold) + " (for " +
                     (x.defined() ? ops::describe(x) : std::string("undefined")) + ")");
  return unary(UnaryOp::softplus, x, {.alpha = beta, .beta = threshold});
}

}  // namespace mixgrad::F

namespace mixgrad {

Tensor operator+(const Tensor& a, const Tensor& b) { return F::add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return F::sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return F::mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return F::div(a, b); }
Tensor operator-(const Tensor& x) { return F::neg(x); }
Tensor operator+(const Tensor& a, double b) { return F::add(a, b); }
Tensor operator+(double a, const Tensor& b) { return F::add(b, a); }
Tensor operator-(const Tensor& a, double b) { return F::sub(a, b); }
Tensor operator-(double a, const Tensor& b) { return F::sub(a, b); }
Tensor operator*(const Tensor& a, double b) { return F::mul(a, b); }
Tensor operator*(double a, const Tensor& b) { return F::mul(b, a); }
Tensor operator/(const Tensor& a, double b) { return F::div(a, b); }
Tensor operator/(double a, const Tensor& b) { return F::div(a, b); }
Tensor operator==(const Tensor& a, const Tensor& b) { return F::eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return F::ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return F::lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return F::le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return F::gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return F::ge(a, b); }
Tensor operator>(const Tensor& a, double b) { return F::gt(a, b); }
Tensor operator<(const Tensor& a, double b) { return F::lt(a, b); }
Tensor operator>=(const Tensor& a, double b) { return F::ge(a, b); }
Tensor operator<=(const Tensor& a, double b) { return F::le(a, b); }

}  // namespace mixgrad
