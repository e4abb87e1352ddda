// Element math of the unary ops: each functor holds the forward value and
// the derivative, written once for every device and for both backwards.
// `C` is the compute type (float for float16 / bfloat16 storage, see
// compute_t). core/unary_ops.def lists the functors, one line per op.
//
// A functor's `grad(g, saved)` takes the upstream gradient and the one
// tensor the backward keeps, `kSaved`: the input `x` or the output `y` (tanh,
// sigmoid, exp, sqrt, rsqrt and relu keep the output, so the input can be
// freed after the forward). `grad` is a template over the value type V: the
// kernels call it on scalars (V = C), a recorded backward (create_graph) on
// Tensors (C = double, each operation a recorded F:: op), so the one
// derivative is differentiable again. It is written with operators, C(...)
// constants and the functions of kernels::math (value_math.hpp):
//
//   kernels::Tanh<float> f{};
//   float y = f(0.5f);
//   float dx = f.grad(1.0f, y);                             // 1 - y * y
//   Tensor gx = kernels::Tanh<double>{}.grad(g, y_tensor);  // recorded
//
// Where a result is chosen by a comparison, both candidates are computed
// before math::select: a select of ready values compiles to a vector blend,
// while arithmetic inside a branch keeps the loop scalar and branchy.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/element_inline.hpp"
#include "kernels/fast_float.hpp"
#include "kernels/value_math.hpp"
#include "mixgrad/half.hpp"

namespace mixgrad::kernels {

/// Which tensor a unary op's backward keeps for its `grad`.
enum class Saved : uint8_t {
  nothing,  // the derivative reads g alone (neg)
  input,    // x
  output,   // y = op(x)
};

/// What a functor declares besides its math, by deriving from UnaryTraits:
/// `kSaved`, the tensor its backward keeps, and `kIntegers`, whether the op
/// is meaningful on integer tensors (int8, uint8, int32, int64).
///
///   struct Exp : UnaryTraits<Saved::output> {...};              // floating only
///   struct Abs : UnaryTraits<Saved::input, kOnIntegers> {...};
template <Saved S, bool Integers = false>
struct UnaryTraits {
  static constexpr Saved kSaved = S;
  static constexpr bool kIntegers = Integers;
};
inline constexpr bool kOnIntegers = true;

/// Parameters of the parameterised unary ops (leaky_relu's slope in `alpha`,
/// clamp's bounds in `alpha` and `beta`, softplus's beta in `alpha` and its
/// threshold in `beta`).
struct UnaryParams {
  double alpha = 0.0;
  double beta = 0.0;
};

/// The functor F<C> of an op, built from its parameters where it takes any.
template <template <class> class F, class C>
MIXGRAD_ELEMENT F<C> make_unary(const UnaryParams& p) {
  if constexpr (std::is_constructible_v<F<C>, const UnaryParams&>) return F<C>(p);
  else return F<C>{};
}

template <class C>
struct Neg : UnaryTraits<Saved::nothing, kOnIntegers> {
  MIXGRAD_ELEMENT C operator()(C x) const { return -x; }
  template <class V>
  MIXGRAD_ELEMENT V grad(V g, V) const { return -g; }
};

template <class C>
struct Exp : UnaryTraits<Saved::output> {
  MIXGRAD_ELEMENT C operator()(C x) const { return math::exp(x); }
  template <class V>
  MIXGRAD_ELEMENT V grad(V g, V y) const { return g * y; }
};

template <class C>
struct Log : UnaryTraits<Saved::input> {
  MIXGRAD_ELEMENT C operator()(C x) const { return math::log(x); }
  template <class V>
  MIXGRAD_ELEMENT V grad(V g, V x) const { return g / x; }
};

template <class C>
struct Sqrt : UnaryTraits<Saved::output> {
  MIXGRAD_ELEMENT C operator()(C x) const { return std::sqrt(x); }
  template <class V>
  MIXGRAD_ELEMENT V grad(V g, V y) const { return C(0.5) * g / y; }
};

// d/dx x^(-1/2) = -1/2 x^(-3/2) = -1/2 y^3
template <class C>
struct Rsqrt : UnaryTraits<Saved::output> {
  MIXGRAD_ELEMENT C operator()(C x) const { return C(1) / std::sqrt(x); }
  template <class V>
  MIXGRAD_ELEMENT V grad(V g, V y) const { return C(-0.5) * g * y * y * y; }
};

// the gradient at 0 is 0
template <class C>
struct Abs : UnaryTraits<Saved::input, kOnIntegers> {
  MIXGRAD_ELEMENT C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>) return x;  // uint8
    else return x < C(0) ? -x : x;
  }
  template <class V>
  MIXGRAD_ELEMENT V grad(V g, V x) const {
    if constexpr (std::is_unsigned_v<C>) {
      return math::select(x > C(0), g, C(0));
    } else {
      const V neg = -g;
      return math::select(x > C(0), g, math::select(x < C(0), neg, C(0)));
    }
  }
};

// NaN stays NaN, the gradient passes where lo <= x <= hi
template <class C>
struct Clamp : UnaryTraits<Saved::input, kOnIntegers> {
  C lo, hi;
  MIXGRAD_ELEMENT explicit Clamp(const UnaryParams& p) : lo(bound(p.alpha)), hi(bound(p.beta)) {}
  // Integer bounds saturate to C's range: clamp(uint8, -1, 300) is clamp(0, 255),
  // where a plain conversion would be undefined.
  MIXGRAD_ELEMENT static C bound(double v) {
    if constexpr (std::is_integral_v<C>) {
      constexpr double kLo = static_cast<double>(std::numeric_limits<C>::lowest());
      constexpr double kHi = static_cast<double>(std::numeric_limits<C>::max());
      return v <= kLo ? std::numeric_limits<C>::lowest() : (!(v < kHi) ? std::numeric_limits<C>::max() : static_cast<C>(v));
    } else {
      return static_cast<C>(v);
    }
  }
  MIXGRAD_ELEMENT C operator()(C x) const { return x < lo ? lo : (x > hi ? hi : x); }
  template <class V>
  MIXGRAD_ELEMENT V grad(V g, V x) const {
    return math::select(x >= lo, math::select(x <= hi, g, C(0)), C(0));
  }
};

// NaN propagates (x <= 0 is false for NaN), -0 becomes +0
template <class C>
struct Relu : UnaryTraits<Saved::output, kOnIntegers> {
  MIXGRAD_ELEMENT C operator()(C x) const { return x <= C(0) ? C(0) : x; }
  template <class V>
  MIXGRAD_ELEMENT V grad(V g, V y) const { return math::select(y > C(0), g, C(0)); }
};

template <class C>
struct LeakyRelu : UnaryTraits<Saved::input> {
  C slope;
  MIXGRAD_ELEMENT explicit LeakyRelu(const UnaryParams& p) : slope(static_cast<C>(p.alpha)) {}
  MIXGRAD_ELEMENT C operator()(C x) const {
    const C scaled = x * slope;
    return x > C(0) ? x : scaled;
  }
  template <class V>
  MIXGRAD_ELEMENT V grad(V g, V x) const {
    const V scaled = g * slope;
    return math::select(x > C(0), g, scaled);
  }
};

// 0.5 x (1 + erf(x / sqrt 2)), derivative Phi(x) + x phi(x). With
// u = x / sqrt 2 the density is e^-u^2 / sqrt(2 pi), written as
// exp(-(u * u)): the exponential erf_float computes for |u| >= 0.92, so
// the float kernel evaluates it once for both.
template <class C>
struct Gelu : UnaryTraits<Saved::input> {
  static constexpr double kInvSqrt2 = 0.70710678118654752440;
  static constexpr double kInvSqrt2Pi = 0.39894228040143267794;
  MIXGRAD_ELEMENT C operator()(C x) const { return C(0.5) * x * (C(1) + math::erf(x * C(kInvSqrt2))); }
  template <class V>
  MIXGRAD_ELEMENT V grad(V g, V x) const {
    const V u = x * C(kInvSqrt2);
    const V cdf = C(0.5) * (C(1) + math::erf(u));
    const V pdf = C(kInvSqrt2Pi) * math::exp(-(u * u));
    return g * (cdf + x * pdf);
  }
};

template <class C>
struct Sigmoid : UnaryTraits<Saved::output> {
  MIXGRAD_ELEMENT C operator()(C x) const { return math::sigmoid(x); }
  template <class V>
  MIXGRAD_ELEMENT V grad(V g, V y) const { return g * y * (C(1) - y); }
};

template <class C>
struct Tanh : UnaryTraits<Saved::output> {
  MIXGRAD_ELEMENT C operator()(C x) const {
    return math::tanh(x);
  }
  template <class V>
  MIXGRAD_ELEMENT V grad(V g, V y) const { return g * (C(1) - y * y); }
};

// x * s(x), derivative s (1 + x (1 - s))
template <class C>
struct Silu : UnaryTraits<Saved::input> {
  MIXGRAD_ELEMENT C operator()(C x) const { return x * math::sigmoid(x); }
  template <class V>
  MIXGRAD_ELEMENT V grad(V g, V x) const {
    const V s = math::sigmoid(x);
    return g * s * (C(1) + x * (C(1) - s));
  }
};

template <class C>
struct Sin : UnaryTraits<Saved::input> {
  MIXGRAD_ELEMENT C operator()(C x) const { return std::sin(x); }
  template <class V>
  MIXGRAD_ELEMENT V grad(V g, V x) const { return g * math::cos(x); }
};

template <class C>
struct Cos : UnaryTraits<Saved::input> {
  MIXGRAD_ELEMENT C operator()(C x) const { return std::cos(x); }
  template <class V>
  MIXGRAD_ELEMENT V grad(V g, V x) const { return -g * math::sin(x); }
};

// d tan = 1 + tan^2, so the output is all the backward needs
template <class C>
struct Tan : UnaryTraits<Saved::output> {
  MIXGRAD_ELEMENT C operator()(C x) const { return std::tan(x); }
  template <class V>
  MIXGRAD_ELEMENT V grad(V g, V y) const { return g * (C(1) + y * y); }
};

template <class C>
struct Log1p : UnaryTraits<Saved::input> {
  MIXGRAD_ELEMENT C operator()(C x) const { return math::log1p(x); }
  template <class V>
  MIXGRAD_ELEMENT V grad(V g, V x) const { return g / (C(1) + x); }
};

// d(e^x - 1) = e^x = y + 1
template <class C>
struct Expm1 : UnaryTraits<Saved::output> {
  MIXGRAD_ELEMENT C operator()(C x) const { return math::expm1(x); }
  template <class V>
  MIXGRAD_ELEMENT V grad(V g, V y) const { return g * (y + C(1)); }
};

// d erf = 2 / sqrt(pi) e^(-x^2)
template <class C>
struct Erf : UnaryTraits<Saved::input> {
  static constexpr double kTwoOverSqrtPi = 1.12837916709551257390;
  MIXGRAD_ELEMENT C operator()(C x) const { return math::erf(x); }
  template <class V>
  MIXGRAD_ELEMENT V grad(V g, V x) const { return g * C(kTwoOverSqrtPi) * math::exp(-x * x); }
};

// PyTorch's softplus: log(1 + e^(beta x)) / beta, and x itself
// where beta x > threshold (the gradient there is 1). Written as
// max(bx, 0) + log1p(e^-|bx|) and g sigmoid(bx), which do not overflow, so
// a large threshold gives the soft value rather than inf or NaN.
template <class C>
struct Softplus : UnaryTraits<Saved::input> {
  C beta, threshold;
  MIXGRAD_ELEMENT explicit Softplus(const UnaryParams& p)
      : beta(static_cast<C>(p.alpha)), threshold(static_cast<C>(p.beta)) {}
  MIXGRAD_ELEMENT C operator()(C x) const {
    const C bx = x * beta;
    const C abs_bx = bx < C(0) ? -bx : bx;
    const C pos = bx > C(0) ? bx : C(0);
    const C soft = (pos + math::log1p(math::exp(-abs_bx))) / beta;
    return bx > threshold ? x : soft;
  }
  template <class V>
  MIXGRAD_ELEMENT V grad(V g, V x) const {
    const V bx = x * beta;
    const V soft = g * math::sigmoid(bx);
    return math::select(bx > threshold, g, soft);
  }
};

// x * relu6(x + 3) / 6, derivative x / 3 + 1/2 on [-3, 3] (one-sided
// at the kinks as PyTorch: 0 below -3, the middle formula at +-3, 1 above 3)
template <class C>
struct Hardswish : UnaryTraits<Saved::input> {
  MIXGRAD_ELEMENT C operator()(C x) const {
    const C r = x + C(3);
    const C relu6 = r < C(0) ? C(0) : (r > C(6) ? C(6) : r);
    return x * relu6 / C(6);
  }
  template <class V>
  MIXGRAD_ELEMENT V grad(V g, V x) const {
    const V mid = g * (x / C(3) + C(0.5));
    return math::select(x < C(-3), C(0), math::select(x <= C(3), mid, g));
  }
};

// x * tanh(softplus(x)). With e = e^x and n = e (e + 2),
// tanh(log(1 + e)) = n / (n + 2) and 1 - tanh^2 = 4 (n + 1) / (n + 2)^2: one
// exp, no cancellation. Past x = 20 tanh(softplus(x)) is 1 to double
// precision, so the output is x and the gradient g (n would overflow float).
template <class C>
struct Mish : UnaryTraits<Saved::input> {
  static constexpr double kLinear = 20.0;
  MIXGRAD_ELEMENT C operator()(C x) const {
    const C e = math::exp(x);
    const C n = e * (e + C(2));
    const C soft = x * n / (n + C(2));
    return x > C(kLinear) ? x : soft;
  }
  template <class V>
  MIXGRAD_ELEMENT V grad(V g, V x) const {
    // x capped at kLinear: past it the soft value is not taken, and a
    // recorded backward's e^x must not overflow (inf * 0 is NaN).
    const V xs = math::select(x > C(kLinear), C(kLinear), x);
    const V e = math::exp(xs);
    const V n = e * (e + C(2));
    const V d = n + C(2);
    const V t = n / d;
    const V s = e / (C(1) + e);
    const V soft = g * (t + xs * s * C(4) * (n + C(1)) / (d * d));
    return math::select(x > C(kLinear), g, soft);
  }
};

// GPT-2's GELU, 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3)
// (PyTorch's approximate="tanh"), computed as x s with s = sigmoid(2u), the
// same function: one exponential and one division, and no 1 + tanh(u) to
// cancel where u is very negative. Derivative s + x s (1 - s) (2u)' with
// (2u)' = 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2). float's sigmoid is
// sigmoid_float (math::sigmoid).
template <class C>
struct GeluTanh : UnaryTraits<Saved::input> {
  static constexpr double kTwoSqrt2OverPi = 1.5957691216057307118;
  static constexpr double kCubic = 0.044715;
  MIXGRAD_ELEMENT C operator()(C x) const {
    return x * math::sigmoid(C(kTwoSqrt2OverPi) * (x + C(kCubic) * x * x * x));
  }
  template <class V>
  MIXGRAD_ELEMENT V grad(V g, V x) const {
    const V s = math::sigmoid(C(kTwoSqrt2OverPi) * (x + C(kCubic) * x * x * x));
    const V du = C(kTwoSqrt2OverPi) * (C(1) + C(3 * kCubic) * x * x);
    return g * (s + x * s * (C(1) - s) * du);
  }
};

// PyTorch's hardtanh: x clamped to [lo, hi] (alpha, beta); NaN stays NaN.
// The gradient is g strictly inside (lo, hi) and 0 at and beyond the bounds,
// as PyTorch's hardtanh_backward (whose scalar form also passes g for NaN).
template <class C>
struct Hardtanh : UnaryTraits<Saved::input> {
  C lo, hi;
  MIXGRAD_ELEMENT explicit Hardtanh(const UnaryParams& p)
      : lo(static_cast<C>(p.alpha)), hi(static_cast<C>(p.beta)) {}
  MIXGRAD_ELEMENT C operator()(C x) const { return x < lo ? lo : (x > hi ? hi : x); }
  template <class V>
  MIXGRAD_ELEMENT V grad(V g, V x) const {
    return math::select(x <= lo, C(0), math::select(x >= hi, C(0), g));
  }
};

}  // namespace mixgrad::kernels
