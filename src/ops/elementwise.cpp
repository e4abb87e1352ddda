// Elementwise ops and their gradients.
//
// Every op takes the one path: validate (errors name the op, the shapes and
// the dtypes) -> autocast -> promote mixed dtypes with a recorded astype, so
// gradients flow back to each input in its own dtype -> backend kernel ->
// record. Recording goes through ops::record_lazy: the backward closure (and the
// reference counts of what it captures) is only built when a GradManager
// tracks an input, so inference pays nothing for autodiff.
//
// Backward closures call the backend directly rather than F:: ops: they
// need no validation, and autocast must not re-cast gradients when backward
// runs inside an autocast scope. When the backward is itself recorded
// (gi.create_graph(): higher-order gradients) they take a second path written
// with F:: ops on the saved tensors, so every gradient here is differentiable
// again; the walk turns autocast off for it.
#include "mixgrad/ops/elementwise.hpp"

#include <cmath>

#include "backend/elementwise.hpp"
#include "core/sizes.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/reduction.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"
#include "ops/untracked_copy.hpp"

namespace mixgrad::F {

namespace {

using autodiff::InputGrads;
using backend::BinaryGradOp;
using backend::BinaryOp;
using backend::CompareOp;
using backend::Operand;
using backend::UnaryOp;
using backend::UnaryParams;

/// Which dtypes an op takes.
enum class Accepts : uint8_t {
  floating,  // float16, bfloat16, float32, float64
  numeric,   // and int8, uint8, int32, int64
  any,       // and bool
};

/// Which tensor a unary op's backward keeps.
enum class Saved : uint8_t { nothing, input, output };

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
  Tensor out = empty(shape, dtype, device);
  backend::binary(op, a, b, out);
  return out;
}

/// g op y, in g's shape and dtype (y broadcasts to g).
Tensor grad_binary(BinaryOp op, const Tensor& g, const Operand& y) {
  return run_binary(op, g, y, g.shape(), g.dtype(), g.device());
}

Tensor grad_kernel(BinaryGradOp op, const Tensor& g, const Operand& x, const Operand& y) {
  Tensor dx = empty(g.shape(), g.dtype(), g.device());
  backend::binary_grad(op, g, x, y, dx);
  return dx;
}

Tensor negated(const Tensor& g) {
  Tensor out = empty(g.shape(), g.dtype(), g.device());
  backend::unary(UnaryOp::neg, g, out, {});
  return out;
}

// ---- recorded (differentiable) gradients: F:: ops only ----------------------

/// g where `keep`, else 0.
Tensor masked(const Tensor& keep, const Tensor& g) { return where(keep, g, zeros_like(g)); }

/// maximum / minimum's gradient for `self` as a tracked op: all of g where
/// self wins, half of it on a tie (the kernel's rule).
Tensor max_min_graph(BinaryGradOp op, const Tensor& g, const Tensor& self_wins, const Tensor& tie) {
  (void)op;
  return where(self_wins, g, masked(tie, mul(g, 0.5)));
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
  ops::record_lazy({&in.a, &in.b}, out, [&] {
    return [a = in.a, b = in.b, grad_op](const Tensor& g_in, InputGrads& gi) {
      const Tensor g = ops::in_dtype(g_in, a.dtype());
      if (gi.create_graph()) {
        const bool is_max = grad_op == BinaryGradOp::maximum;
        const Tensor tie = eq(a, b);
        if (gi.needs(0)) gi.set(0, sum_to(max_min_graph(grad_op, g, is_max ? gt(a, b) : lt(a, b), tie), a.shape()));
        if (gi.needs(1)) gi.set(1, sum_to(max_min_graph(grad_op, g, is_max ? gt(b, a) : lt(b, a), tie), b.shape()));
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
  ops::record_lazy({&x}, out, [&] {
    return [x, b, grad_op](const Tensor& g, InputGrads& gi) {
      if (gi.create_graph()) {
        const bool is_max = grad_op == BinaryGradOp::maximum;
        gi.set(0, max_min_graph(grad_op, g, is_max ? gt(x, b) : lt(x, b), eq(x, b)));
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
  Tensor out = empty(in.shape, DType::bool_, in.a.device());
  backend::compare(op, in.a, in.b, out);
  return out;
}

Tensor compare(const char* name, CompareOp op, const Tensor& a, double b) {
  const Tensor x = prepare({name, OpKind::compare, Accepts::any}, a);
  Tensor out = empty(x.shape(), DType::bool_, x.device());
  backend::compare(op, x, b, out);
  return out;
}

// ---- unary -----------------------------------------------------------------

struct UnarySpec {
  const char* name;
  OpKind kind;
  UnaryOp op;
  Saved saved;
  Accepts accepts;
};

/// The derivative of a unary op times g, as tracked F:: ops on the saved
/// tensor (x or y, as the spec saves it); the kernels' conventions at kinks.
Tensor unary_grad_graph(UnaryOp op, const Tensor& g, const Tensor& s, const UnaryParams& p) {
  constexpr double kInvSqrt2 = 0.70710678118654752440, kInvSqrt2Pi = 0.39894228040143267794;
  constexpr double kTwoOverSqrtPi = 1.12837916709551257390;
  switch (op) {
    case UnaryOp::neg: return neg(g);
    case UnaryOp::exp: return mul(g, s);
    case UnaryOp::log: return div(g, s);
    case UnaryOp::sqrt: return div(mul(g, 0.5), s);
    case UnaryOp::rsqrt: return mul(mul(g, -0.5), mul(mul(s, s), s));
    case UnaryOp::abs: return where(gt(s, 0.0), g, masked(lt(s, 0.0), neg(g)));
    case UnaryOp::clamp: return masked(ge(s, p.alpha), masked(le(s, p.beta), g));
    case UnaryOp::relu: return masked(gt(s, 0.0), g);
    case UnaryOp::leaky_relu: return where(gt(s, 0.0), g, mul(g, p.alpha));
    case UnaryOp::gelu: {
      const Tensor cdf = mul(add(erf(mul(s, kInvSqrt2)), 1.0), 0.5);
      const Tensor pdf = mul(exp(mul(mul(s, s), -0.5)), kInvSqrt2Pi);
      return mul(g, add(cdf, mul(s, pdf)));
    }
    case UnaryOp::sigmoid: return mul(g, mul(s, sub(1.0, s)));
    case UnaryOp::tanh: return mul(g, sub(1.0, mul(s, s)));
    case UnaryOp::silu: {
      const Tensor sg = sigmoid(s);
      return mul(g, mul(sg, add(mul(s, sub(1.0, sg)), 1.0)));
    }
    case UnaryOp::sin: return mul(g, cos(s));
    case UnaryOp::cos: return neg(mul(g, sin(s)));
    case UnaryOp::tan: return mul(g, add(mul(s, s), 1.0));
    case UnaryOp::log1p: return div(g, add(s, 1.0));
    case UnaryOp::expm1: return mul(g, add(s, 1.0));
    case UnaryOp::erf: return mul(g, mul(exp(neg(mul(s, s))), kTwoOverSqrtPi));
    case UnaryOp::softplus: {
      const Tensor bx = mul(s, p.alpha);
      return where(gt(bx, p.beta), g, mul(g, sigmoid(bx)));
    }
    case UnaryOp::hardswish:
      return masked(ge(s, -3.0), where(le(s, 3.0), mul(g, add(div(s, 3.0), 0.5)), g));
    case UnaryOp::mish: {
      const Tensor t = tanh(softplus(s));
      const Tensor soft = mul(g, add(t, mul(mul(s, sigmoid(s)), sub(1.0, mul(t, t)))));
      return where(gt(s, 20.0), g, soft);
    }
    case UnaryOp::gelu_tanh: {
      constexpr double k = 0.79788456080286535588, c = 0.044715;
      const Tensor t = tanh(mul(add(s, mul(mul(mul(s, s), s), c)), k));
      const Tensor du = mul(add(mul(mul(s, s), 3 * c), 1.0), k);
      return mul(g, add(mul(add(t, 1.0), 0.5), mul(mul(mul(s, 0.5), sub(1.0, mul(t, t))), du)));
    }
    case UnaryOp::kCount: break;
  }
  throw Error("unary: internal error: no recorded gradient for this op");
}

Tensor unary(const UnarySpec& s, const Tensor& x_in, const UnaryParams& params = {}) {
  ops::check_defined(s.name, {&x_in});
  if (!accepted(x_in.dtype(), s.accepts)) throw_not_accepted(s.name, s.accepts, ops::describe(x_in));
  Tensor x = x_in;
  amp::autocast_inputs(s.kind, {&x});
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  backend::unary(s.op, x, out, params);
  ops::record_lazy({&x}, out, [&] {
    // Keep only the tensor the derivative reads; `nothing` (neg) reads g.
    Tensor saved = s.saved == Saved::output ? out : (s.saved == Saved::input ? x : Tensor());
    return [op = s.op, saved = std::move(saved), params](const Tensor& g_in, InputGrads& gi) {
      if (gi.create_graph()) {
        gi.set(0, unary_grad_graph(op, g_in, saved, params));
        return;
      }
      const Tensor g = saved.defined() ? ops::in_dtype(g_in, saved.dtype()) : g_in;
      Tensor dx = empty(g.shape(), g.dtype(), g.device());
      backend::unary_grad(op, g, saved.defined() ? saved : g, dx, params);
      gi.set(0, dx);
    };
  });
  return out;
}

constexpr UnarySpec kNeg{"neg", OpKind::neg, UnaryOp::neg, Saved::nothing, Accepts::numeric};
constexpr UnarySpec kExp{"exp", OpKind::exp, UnaryOp::exp, Saved::output, Accepts::floating};
constexpr UnarySpec kLog{"log", OpKind::log, UnaryOp::log, Saved::input, Accepts::floating};
constexpr UnarySpec kSqrt{"sqrt", OpKind::sqrt, UnaryOp::sqrt, Saved::output, Accepts::floating};
constexpr UnarySpec kRsqrt{"rsqrt", OpKind::rsqrt, UnaryOp::rsqrt, Saved::output, Accepts::floating};
constexpr UnarySpec kAbs{"abs", OpKind::abs, UnaryOp::abs, Saved::input, Accepts::numeric};
constexpr UnarySpec kClamp{"clamp", OpKind::clamp, UnaryOp::clamp, Saved::input, Accepts::numeric};
constexpr UnarySpec kRelu{"relu", OpKind::relu, UnaryOp::relu, Saved::output, Accepts::numeric};
constexpr UnarySpec kLeakyRelu{"leaky_relu", OpKind::leaky_relu, UnaryOp::leaky_relu, Saved::input, Accepts::floating};
constexpr UnarySpec kGelu{"gelu", OpKind::gelu, UnaryOp::gelu, Saved::input, Accepts::floating};
constexpr UnarySpec kSigmoid{"sigmoid", OpKind::sigmoid, UnaryOp::sigmoid, Saved::output, Accepts::floating};
constexpr UnarySpec kTanh{"tanh", OpKind::tanh, UnaryOp::tanh, Saved::output, Accepts::floating};
constexpr UnarySpec kSilu{"silu", OpKind::silu, UnaryOp::silu, Saved::input, Accepts::floating};
constexpr UnarySpec kSin{"sin", OpKind::sin, UnaryOp::sin, Saved::input, Accepts::floating};
constexpr UnarySpec kCos{"cos", OpKind::cos, UnaryOp::cos, Saved::input, Accepts::floating};
constexpr UnarySpec kTan{"tan", OpKind::tan, UnaryOp::tan, Saved::output, Accepts::floating};
constexpr UnarySpec kLog1p{"log1p", OpKind::log1p, UnaryOp::log1p, Saved::input, Accepts::floating};
constexpr UnarySpec kExpm1{"expm1", OpKind::expm1, UnaryOp::expm1, Saved::output, Accepts::floating};
constexpr UnarySpec kErf{"erf", OpKind::erf, UnaryOp::erf, Saved::input, Accepts::floating};
constexpr UnarySpec kSoftplus{"softplus", OpKind::softplus, UnaryOp::softplus, Saved::input, Accepts::floating};
constexpr UnarySpec kHardswish{"hardswish", OpKind::hardswish, UnaryOp::hardswish, Saved::input, Accepts::floating};
constexpr UnarySpec kMish{"mish", OpKind::mish, UnaryOp::mish, Saved::input, Accepts::floating};
constexpr UnarySpec kGeluTanh{"gelu", OpKind::gelu, UnaryOp::gelu_tanh, Saved::input, Accepts::floating};

}  // namespace

// ---- binary ops --------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b) {
  BinaryInputs in = prepare(kAdd, a, b);
  Tensor out = forward(BinaryOp::add, in);
  ops::record_lazy({&in.a, &in.b}, out, [&] {
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
  ops::record_lazy({&in.a, &in.b}, out, [&] {
    return [sa = in.a.shape(), sb = in.b.shape()](const Tensor& g, InputGrads& gi) {
      if (gi.needs(0)) gi.set(0, sum_to(g, sa));
      if (gi.needs(1)) gi.set(1, gi.create_graph() ? neg(sum_to(g, sb)) : negated(sum_to(g, sb)));
    };
  });
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  BinaryInputs in = prepare(kMul, a, b);
  Tensor out = forward(BinaryOp::mul, in);
  ops::record_lazy({&in.a, &in.b}, out, [&] {
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
  ops::record_lazy({&in.a, &in.b}, out, [&] {
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
  ops::record_lazy({&in.a, &in.b}, out, [&] {
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
  Tensor out = empty(shape, dtype, ta.device());
  backend::where(cond, ta, tb, out);
  ops::record_lazy({&ta, &tb}, out, [&] {
    return [cond, sa = ta.shape(), sb = tb.shape()](const Tensor& g, InputGrads& gi) {
      if (gi.create_graph()) {
        if (gi.needs(0)) gi.set(0, sum_to(where(cond, g, zeros_like(g)), sa));
        if (gi.needs(1)) gi.set(1, sum_to(where(cond, zeros_like(g), g), sb));
        return;
      }
      for (size_t i = 0; i < 2; ++i) {
        if (!gi.needs(i)) continue;
        Tensor masked = empty(g.shape(), g.dtype(), g.device());
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
  ops::record_lazy({&x}, out, [&] {
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
  ops::record_lazy({&x}, out, [&] {
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
  ops::record_lazy({&x}, out, [&] {
    return [](const Tensor& g, InputGrads& gi) { gi.set(0, gi.create_graph() ? neg(g) : negated(g)); };
  });
  return out;
}

Tensor mul(const Tensor& a, double b) {
  const Tensor x = prepare(kMul, a);
  Tensor out = run_binary(BinaryOp::mul, x, b, x.shape(), x.dtype(), x.device());
  ops::record_lazy({&x}, out, [&] {
    return [b](const Tensor& g, InputGrads& gi) {
      gi.set(0, gi.create_graph() ? mul(g, b) : grad_binary(BinaryOp::mul, g, b));
    };
  });
  return out;
}

Tensor div(const Tensor& a, double b) {
  const Tensor x = prepare(kDiv, a);
  Tensor out = run_binary(BinaryOp::div, x, b, x.shape(), x.dtype(), x.device());
  ops::record_lazy({&x}, out, [&] {
    return [b](const Tensor& g, InputGrads& gi) {
      gi.set(0, gi.create_graph() ? div(g, b) : grad_binary(BinaryOp::div, g, b));
    };
  });
  return out;
}

Tensor div(double a, const Tensor& b) {
  const Tensor x = prepare(kDiv, b);
  Tensor out = run_binary(BinaryOp::div, a, x, x.shape(), x.dtype(), x.device());
  ops::record_lazy({&x}, out, [&] {
    return [x, out](const Tensor& g, InputGrads& gi) {
      if (gi.create_graph()) return gi.set(0, neg(div(mul(g, out), x)));
      gi.set(0, grad_kernel(BinaryGradOp::div_divisor, ops::in_dtype(g, x.dtype()), x, out));
    };
  });
  return out;
}

Tensor pow(const Tensor& a, double exponent) {
  const Tensor x = prepare(kPow, a);
  Tensor out = run_binary(BinaryOp::pow, x, exponent, x.shape(), x.dtype(), x.device());
  ops::record_lazy({&x}, out, [&] {
    return [x, exponent](const Tensor& g, InputGrads& gi) {
      if (gi.create_graph()) return gi.set(0, mul(g, mul(pow(x, exponent - 1.0), exponent)));
      gi.set(0, grad_kernel(BinaryGradOp::pow_base, ops::in_dtype(g, x.dtype()), x, exponent));
    };
  });
  return out;
}

Tensor maximum(const Tensor& a, double b) { return max_min(kMaximum, BinaryOp::maximum, BinaryGradOp::maximum, a, b); }
Tensor minimum(const Tensor& a, double b) { return max_min(kMinimum, BinaryOp::minimum, BinaryGradOp::minimum, a, b); }

// ---- comparisons ---------------------------------------------------------------

Tensor eq(const Tensor& a, const Tensor& b) { return compare("eq", CompareOp::eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare("ne", CompareOp::ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare("lt", CompareOp::lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare("le", CompareOp::le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare("gt", CompareOp::gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare("ge", CompareOp::ge, a, b); }
Tensor eq(const Tensor& a, double b) { return compare("eq", CompareOp::eq, a, b); }
Tensor ne(const Tensor& a, double b) { return compare("ne", CompareOp::ne, a, b); }
Tensor lt(const Tensor& a, double b) { return compare("lt", CompareOp::lt, a, b); }
Tensor le(const Tensor& a, double b) { return compare("le", CompareOp::le, a, b); }
Tensor gt(const Tensor& a, double b) { return compare("gt", CompareOp::gt, a, b); }
Tensor ge(const Tensor& a, double b) { return compare("ge", CompareOp::ge, a, b); }

// ---- unary ops -------------------------------------------------------------------

Tensor neg(const Tensor& x) { return unary(kNeg, x); }
Tensor exp(const Tensor& x) { return unary(kExp, x); }
Tensor log(const Tensor& x) { return unary(kLog, x); }
Tensor sqrt(const Tensor& x) { return unary(kSqrt, x); }
Tensor rsqrt(const Tensor& x) { return unary(kRsqrt, x); }
Tensor abs(const Tensor& x) { return unary(kAbs, x); }

Tensor clamp(const Tensor& x, double lo, double hi) {
  if (!(lo <= hi))
    throw ValueError("clamp: lower bound " + std::to_string(lo) + " is not <= upper bound " + std::to_string(hi) +
                     " (for " + (x.defined() ? ops::describe(x) : std::string("undefined")) + ")");
  return unary(kClamp, x, {.alpha = lo, .beta = hi});
}

Tensor relu(const Tensor& x) { return unary(kRelu, x); }
Tensor leaky_relu(const Tensor& x, double negative_slope) { return unary(kLeakyRelu, x, {.alpha = negative_slope}); }
Tensor gelu(const Tensor& x) { return unary(kGelu, x); }

Tensor gelu(const Tensor& x, GeluApproximation approximate) {
  return approximate == GeluApproximation::tanh ? unary(kGeluTanh, x) : unary(kGelu, x);
}
Tensor sigmoid(const Tensor& x) { return unary(kSigmoid, x); }
Tensor tanh(const Tensor& x) { return unary(kTanh, x); }
Tensor silu(const Tensor& x) { return unary(kSilu, x); }
Tensor sin(const Tensor& x) { return unary(kSin, x); }
Tensor cos(const Tensor& x) { return unary(kCos, x); }
Tensor tan(const Tensor& x) { return unary(kTan, x); }
Tensor log1p(const Tensor& x) { return unary(kLog1p, x); }
Tensor expm1(const Tensor& x) { return unary(kExpm1, x); }
Tensor erf(const Tensor& x) { return unary(kErf, x); }

Tensor softplus(const Tensor& x, double beta, double threshold) {
  if (!std::isfinite(beta) || beta == 0.0 || std::isnan(threshold))
    throw ValueError("softplus: beta must be finite and nonzero and threshold not NaN, got beta=" +
                     std::to_string(beta) + " threshold=" + std::to_string(threshold) + " (for " +
                     (x.defined() ? ops::describe(x) : std::string("undefined")) + ")");
  return unary(kSoftplus, x, {.alpha = beta, .beta = threshold});
}

Tensor hardswish(const Tensor& x) { return unary(kHardswish, x); }
Tensor mish(const Tensor& x) { return unary(kMish, x); }

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
