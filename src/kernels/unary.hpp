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
// Where a result is chosen by a comparison, both candidates are computed
// before the `?:`: a select of ready values compiles to a vector blend,
// while arithmetic inside a branch keeps the loop scalar and branchy.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

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
  MIXGRAD_HOST_DEVICE C grad(C g, C x) const {
    const C neg = -g;
    return x > C(0) ? g : (x < C(0) ? neg : C(0));
  }
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
  MIXGRAD_HOST_DEVICE C operator()(C x) const {
    const C scaled = x * slope;
    return x > C(0) ? x : scaled;
  }
  MIXGRAD_HOST_DEVICE C grad(C g, C x) const {
    const C scaled = g * slope;
    return x > C(0) ? g : scaled;
  }
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

/// tanh in float without libm's tanhf, which goes through expm1f and costs
/// several expf: an odd polynomial for |x| < 0.625 (coefficients fitted for
/// a relative error below 5e-9, far under float's rounding), 1 - 2 / (e^2|x| + 1)
/// beyond, where it has no cancellation to speak of. Both are computed and
/// one selected: no branch to mispredict on mixed-sign data. NaN selects the
/// second and stays NaN; large |x| gives exactly +-1.
MIXGRAD_HOST_DEVICE inline float tanh_float(float x) {
  const float a = x < 0.f ? -x : x;
  const float z = x * x;
  const float p =
      (((-5.704857982e-3f * z + 2.063896040e-2f) * z - 5.373967156e-2f) * z + 1.333144160e-1f) * z - 3.333328192e-1f;
  const float near_zero = std::copysign(x + x * z * p, x);  // keeps tanh(-0) = -0
  const float far = std::copysign(1.f - 2.f / (std::exp(2.f * a) + 1.f), x);
  // A bit-mask blend: compilers turn a `?:` here into a branch around the
  // exp, which mispredicts on about every other element of random data.
  const uint32_t pick_near = 0u - static_cast<uint32_t>(a < 0.625f);
  return detail::bits_float((detail::float_bits(near_zero) & pick_near) | (detail::float_bits(far) & ~pick_near));
}

// saved: y
template <class C>
struct Tanh {
  static constexpr bool kIntegers = false;
  MIXGRAD_HOST_DEVICE C operator()(C x) const {
    if constexpr (std::is_same_v<C, float>) return tanh_float(x);
    else return std::tanh(x);
  }
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
