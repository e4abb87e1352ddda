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
// `kIntegers` says whether the op is meaningful on integer tensors (int8,
// uint8, int32, int64).
// Where a result is chosen by a comparison, both candidates are computed
// before the `?:`: a select of ready values compiles to a vector blend,
// while arithmetic inside a branch keeps the loop scalar and branchy.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "mixgrad/half.hpp"

namespace mixgrad::kernels {

/// Parameters of the parameterised unary ops (leaky_relu's slope in `alpha`,
/// clamp's bounds in `alpha` and `beta`, softplus's beta in `alpha` and its
/// threshold in `beta`).
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
  MIXGRAD_HOST_DEVICE C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>) return x;  // uint8
    else return x < C(0) ? -x : x;
  }
  MIXGRAD_HOST_DEVICE C grad(C g, C x) const {
    if constexpr (std::is_unsigned_v<C>) {
      return x > C(0) ? g : C(0);
    } else {
      const C neg = -g;
      return x > C(0) ? g : (x < C(0) ? neg : C(0));
    }
  }
};

// saved: x; NaN stays NaN, the gradient passes where lo <= x <= hi
template <class C>
struct Clamp {
  static constexpr bool kIntegers = true;
  C lo, hi;
  MIXGRAD_HOST_DEVICE explicit Clamp(const UnaryParams& p) : lo(bound(p.alpha)), hi(bound(p.beta)) {}
  // Integer bounds saturate to C's range: clamp(uint8, -1, 300) is clamp(0, 255),
  // where a plain conversion would be undefined.
  MIXGRAD_HOST_DEVICE static C bound(double v) {
    if constexpr (std::is_integral_v<C>) {
      constexpr double kLo = static_cast<double>(std::numeric_limits<C>::lowest());
      constexpr double kHi = static_cast<double>(std::numeric_limits<C>::max());
      return v <= kLo ? std::numeric_limits<C>::lowest() : (!(v < kHi) ? std::numeric_limits<C>::max() : static_cast<C>(v));
    } else {
      return static_cast<C>(v);
    }
  }
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

/// e^x in float for x <= 0.5 (tanh's and GELU's use): Cephes' degree-6
/// polynomial on the argument reduced by round(x / ln 2), scaled by 2^n
/// through the exponent bits; within 2 ulp of expf, and 0 below -87 (where
/// expf is denormal or 0); NaN stays NaN. Plain arithmetic, so a loop of it
/// vectorises (a call to libm's expf does not).
MIXGRAD_HOST_DEVICE inline float exp_float_nonpositive(float x) {
  const float xc = x >= -87.f ? x : -87.f;  // NaN too: no NaN reaches the integer conversion
  const float n = (xc * 1.44269504088896341f + 12582912.f) - 12582912.f;  // round to nearest
  const float f = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * f + 1.3981999507e-3f;
  p = p * f + 8.3334519073e-3f;
  p = p * f + 4.1665795894e-2f;
  p = p * f + 1.6666665459e-1f;
  p = p * f + 5.0000001201e-1f;
  const float y = p * f * f + f + 1.f;
  const float scale = detail::bits_float(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
  return x != x ? x : (x < -87.f ? 0.f : y * scale);
}

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
  // 1 - 2 / (e^2a + 1) = (1 - e^-2a) / (1 + e^-2a): e^-2a <= 1 never overflows.
  const float e = exp_float_nonpositive(-2.f * a);
  const float far = std::copysign((1.f - e) / (1.f + e), x);
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

// saved: x
template <class C>
struct Sin {
  static constexpr bool kIntegers = false;
  MIXGRAD_HOST_DEVICE C operator()(C x) const { return std::sin(x); }
  MIXGRAD_HOST_DEVICE C grad(C g, C x) const { return g * std::cos(x); }
};

// saved: x
template <class C>
struct Cos {
  static constexpr bool kIntegers = false;
  MIXGRAD_HOST_DEVICE C operator()(C x) const { return std::cos(x); }
  MIXGRAD_HOST_DEVICE C grad(C g, C x) const { return -g * std::sin(x); }
};

// saved: y; d tan = 1 + tan^2, so the output is all the backward needs
template <class C>
struct Tan {
  static constexpr bool kIntegers = false;
  MIXGRAD_HOST_DEVICE C operator()(C x) const { return std::tan(x); }
  MIXGRAD_HOST_DEVICE C grad(C g, C y) const { return g * (C(1) + y * y); }
};

// saved: x
template <class C>
struct Log1p {
  static constexpr bool kIntegers = false;
  MIXGRAD_HOST_DEVICE C operator()(C x) const { return std::log1p(x); }
  MIXGRAD_HOST_DEVICE C grad(C g, C x) const { return g / (C(1) + x); }
};

// saved: y; d(e^x - 1) = e^x = y + 1
template <class C>
struct Expm1 {
  static constexpr bool kIntegers = false;
  MIXGRAD_HOST_DEVICE C operator()(C x) const { return std::expm1(x); }
  MIXGRAD_HOST_DEVICE C grad(C g, C y) const { return g * (y + C(1)); }
};

// saved: x; d erf = 2 / sqrt(pi) e^(-x^2)
template <class C>
struct Erf {
  static constexpr bool kIntegers = false;
  static constexpr double kTwoOverSqrtPi = 1.12837916709551257390;
  MIXGRAD_HOST_DEVICE C operator()(C x) const { return std::erf(x); }
  MIXGRAD_HOST_DEVICE C grad(C g, C x) const { return g * C(kTwoOverSqrtPi) * std::exp(-x * x); }
};

// saved: x; PyTorch's softplus: log(1 + e^(beta x)) / beta, and x itself
// where beta x > threshold (the gradient there is 1). Written as
// max(bx, 0) + log1p(e^-|bx|) and g / (1 + e^-bx), which do not overflow, so
// a large threshold gives the soft value rather than inf or NaN.
template <class C>
struct Softplus {
  static constexpr bool kIntegers = false;
  C beta, threshold;
  MIXGRAD_HOST_DEVICE explicit Softplus(const UnaryParams& p)
      : beta(static_cast<C>(p.alpha)), threshold(static_cast<C>(p.beta)) {}
  MIXGRAD_HOST_DEVICE C operator()(C x) const {
    const C bx = x * beta;
    const C abs_bx = bx < C(0) ? -bx : bx;
    const C pos = bx > C(0) ? bx : C(0);
    const C soft = (pos + std::log1p(std::exp(-abs_bx))) / beta;
    return bx > threshold ? x : soft;
  }
  MIXGRAD_HOST_DEVICE C grad(C g, C x) const {
    const C bx = x * beta;
    const C soft = g / (C(1) + std::exp(-bx));
    return bx > threshold ? g : soft;
  }
};

// saved: x; x * relu6(x + 3) / 6, derivative x / 3 + 1/2 on [-3, 3] (one-sided
// at the kinks as PyTorch: 0 below -3, the middle formula at +-3, 1 above 3)
template <class C>
struct Hardswish {
  static constexpr bool kIntegers = false;
  MIXGRAD_HOST_DEVICE C operator()(C x) const {
    const C r = x + C(3);
    const C relu6 = r < C(0) ? C(0) : (r > C(6) ? C(6) : r);
    return x * relu6 / C(6);
  }
  MIXGRAD_HOST_DEVICE C grad(C g, C x) const {
    const C mid = g * (x / C(3) + C(0.5));
    return x < C(-3) ? C(0) : (x <= C(3) ? mid : g);
  }
};

// saved: x; x * tanh(softplus(x)). With e = e^x and n = e (e + 2),
// tanh(log(1 + e)) = n / (n + 2) and 1 - tanh^2 = 4 (n + 1) / (n + 2)^2: one
// exp, no cancellation. Past x = 20 tanh(softplus(x)) is 1 to double
// precision, so the output is x and the gradient g (n would overflow float).
template <class C>
struct Mish {
  static constexpr bool kIntegers = false;
  static constexpr double kLinear = 20.0;
  MIXGRAD_HOST_DEVICE C operator()(C x) const {
    const C e = std::exp(x);
    const C n = e * (e + C(2));
    const C soft = x * n / (n + C(2));
    return x > C(kLinear) ? x : soft;
  }
  MIXGRAD_HOST_DEVICE C grad(C g, C x) const {
    const C e = std::exp(x);
    const C n = e * (e + C(2));
    const C d = n + C(2);
    const C t = n / d;
    const C s = e / (C(1) + e);
    const C soft = g * (t + x * s * C(4) * (n + C(1)) / (d * d));
    return x > C(kLinear) ? g : soft;
  }
};

// saved: x; GPT-2's GELU, 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3)
// (PyTorch's approximate="tanh"); derivative 0.5 (1 + t) + 0.5 x (1 - t^2) u'
// with u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2). float's tanh is tanh_float.
template <class C>
struct GeluTanh {
  static constexpr bool kIntegers = false;
  static constexpr double kSqrt2OverPi = 0.79788456080286535588;
  static constexpr double kCubic = 0.044715;
  MIXGRAD_HOST_DEVICE static C tanh_of(C u) {
    if constexpr (std::is_same_v<C, float>) return tanh_float(u);
    else return std::tanh(u);
  }
  MIXGRAD_HOST_DEVICE C operator()(C x) const {
    return C(0.5) * x * (C(1) + tanh_of(C(kSqrt2OverPi) * (x + C(kCubic) * x * x * x)));
  }
  MIXGRAD_HOST_DEVICE C grad(C g, C x) const {
    const C t = tanh_of(C(kSqrt2OverPi) * (x + C(kCubic) * x * x * x));
    const C du = C(kSqrt2OverPi) * (C(1) + C(3 * kCubic) * x * x);
    return g * (C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * du);
  }
};

}  // namespace mixgrad::kernels
