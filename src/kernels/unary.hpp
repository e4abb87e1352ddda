// Element math of the unary ops: each functor holds the forward value and
// the derivative, written once for every device. `C` is the compute type
// (float for float16 / bfloat16 storage, see compute_t).
//
// A functor's `grad(g, saved)` takes the upstream gradient and the one
// tensor the backward keeps, named in its comment: the input `x` or the
// output `y` (tanh, sigmoid, exp, sqrt, rsqrt and relu keep the output, so
// the input can be freed after the forward).
//
//   kernels::Tanh<float> f{};
//   float y = f(0.5f);
//   float dx = f.grad(1.0f, y);   // 1 - y * y
//
// `kIntegers` says whether the op is meaningful on int32 / int64 tensors.
#pragma once

#include <cmath>

#include "mixgrad/half.hpp"

namespace mixgrad::kernels {

/// Parameters of the parameterised unary ops (leaky_relu's slope in `alpha`,
/// clamp's bounds in `alpha` and `beta`).
struct UnaryParams {
  double alpha = 0.0;
  double beta = 0.0;
};

template <class C>
struct Neg {
  static constexpr bool kIntegers = true;
  MIXGRAD_HOST_DEVICE C operator()(C x) const { return -x; }
  MIXGRAD_HOST_DEVICE C grad(C g, C) const { return -g; }
};

// saved: y
template <class C>
struct Exp {
  static constexpr bool kIntegers = false;
  MIXGRAD_HOST_DEVICE C operator()(C x) const { return std::exp(x); }
  MIXGRAD_HOST_DEVICE C grad(C g, C y) const { return g * y; }
};

// saved: x
template <class C>
struct Log {
  static constexpr bool kIntegers = false;
  MIXGRAD_HOST_DEVICE C operator()(C x) const { return std::log(x); }
  MIXGRAD_HOST_DEVICE C grad(C g, C x) const { return g / x; }
};

// saved: y
template <class C>
struct Sqrt {
  static constexpr bool kIntegers = false;
  MIXGRAD_HOST_DEVICE C operator()(C x) const { return std::sqrt(x); }
  MIXGRAD_HOST_DEVICE C grad(C g, C y) const { return C(0.5) * g / y; }
};

// saved: y; d/dx x^(-1/2) = -1/2 x^(-3/2) = -1/2 y^3
template <class C>
struct Rsqrt {
  static constexpr bool kIntegers = false;
  MIXGRAD_HOST_DEVICE C operator()(C x) const { return C(1) / std::sqrt(x); }
  MIXGRAD_HOST_DEVICE C grad(C g, C y) const { return C(-0.5) * g * y * y * y; }
};

// saved: x; the gradient at 0 is 0
template <class C>
struct Abs {
  static constexpr bool kIntegers = true;
  MIXGRAD_HOST_DEVICE C operator()(C x) const { return x < C(0) ? -x : x; }
  MIXGRAD_HOST_DEVICE C grad(C g, C x) const { return x > C(0) ? g : (x < C(0) ? -g : C(0)); }
};

// saved: x; NaN stays NaN, the gradient passes where lo <= x <= hi
template <class C>
struct Clamp {
  static constexpr bool kIntegers = true;
  C lo, hi;
  MIXGRAD_HOST_DEVICE explicit Clamp(const UnaryParams& p) : lo(static_cast<C>(p.alpha)), hi(static_cast<C>(p.beta)) {}
  MIXGRAD_HOST_DEVICE C operator()(C x) const { return x < lo ? lo : (x > hi ? hi : x); }
  MIXGRAD_HOST_DEVICE C grad(C g, C x) const { return (x >= lo && x <= hi) ? g : C(0); }
};

// saved: y; NaN propagates (x <= 0 is false for NaN), -0 becomes +0
template <class C>
struct Relu {
  static constexpr bool kIntegers = true;
  MIXGRAD_HOST_DEVICE C operator()(C x) const { return x <= C(0) ? C(0) : x; }
  MIXGRAD_HOST_DEVICE C grad(C g, C y) const { return y > C(0) ? g : C(0); }
};

// saved: x
template <class C>
struct LeakyRelu {
  static constexpr bool kIntegers = false;
  C slope;
  MIXGRAD_HOST_DEVICE explicit LeakyRelu(const UnaryParams& p) : slope(static_cast<C>(p.alpha)) {}
  MIXGRAD_HOST_DEVICE C operator()(C x) const { return x > C(0) ? x : x * slope; }
  MIXGRAD_HOST_DEVICE C grad(C g, C x) const { return x > C(0) ? g : g * slope; }
};

// saved: x; 0.5 x (1 + erf(x / sqrt 2)), derivative Phi(x) + x phi(x)
template <class C>
struct Gelu {
  static constexpr bool kIntegers = false;
  static constexpr double kInvSqrt2 = 0.70710678118654752440;
  static constexpr double kInvSqrt2Pi = 0.39894228040143267794;
  MIXGRAD_HOST_DEVICE C operator()(C x) const { return C(0.5) * x * (C(1) + std::erf(x * C(kInvSqrt2))); }
  MIXGRAD_HOST_DEVICE C grad(C g, C x) const {
    const C cdf = C(0.5) * (C(1) + std::erf(x * C(kInvSqrt2)));
    const C pdf = C(kInvSqrt2Pi) * std::exp(C(-0.5) * x * x);
    return g * (cdf + x * pdf);
  }
};

// saved: y
template <class C>
struct Sigmoid {
  static constexpr bool kIntegers = false;
  MIXGRAD_HOST_DEVICE C operator()(C x) const { return C(1) / (C(1) + std::exp(-x)); }
  MIXGRAD_HOST_DEVICE C grad(C g, C y) const { return g * y * (C(1) - y); }
};

// saved: y
template <class C>
struct Tanh {
  static constexpr bool kIntegers = false;
  MIXGRAD_HOST_DEVICE C operator()(C x) const { return std::tanh(x); }
  MIXGRAD_HOST_DEVICE C grad(C g, C y) const { return g * (C(1) - y * y); }
};

// saved: x; x * s(x), derivative s (1 + x (1 - s))
template <class C>
struct Silu {
  static constexpr bool kIntegers = false;
  MIXGRAD_HOST_DEVICE C operator()(C x) const { return x / (C(1) + std::exp(-x)); }
  MIXGRAD_HOST_DEVICE C grad(C g, C x) const {
    const C s = C(1) / (C(1) + std::exp(-x));
    return g * s * (C(1) + x * (C(1) - s));
  }
};

}  // namespace mixgrad::kernels
