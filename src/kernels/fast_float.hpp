// Float versions of e^x, log, tanh, erf and their kin written as plain
// arithmetic, so that a loop of them vectorises (a call to libm's expf,
// logf, tanhf or erff does not). Used by the unary functors
// (kernels/unary.hpp, through kernels::math) and the CPU's vector
// exponential (backend/cpu/vector_exp.hpp). Each keeps NaN, the infinities
// and the signed zeros as libm does; tests/ops/test_fast_float.cpp holds
// each within a few ulp of the float64 value.
//
//   float y = kernels::tanh_float(0.5f);   // tanh(0.5) within float rounding
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/element_inline.hpp"
#include "mixgrad/half.hpp"

namespace mixgrad::kernels {

/// e^xc = y 2^n for xc in [-87, 0.5]: n = round(xc / ln 2) and y = e^(xc - n ln 2)
/// by Cephes' degree-6 polynomial. Written on V = float or a GCC vector of
/// floats, so that the CPU kernels' vector exponential
/// (backend/cpu/vector_exp.hpp) runs the same arithmetic lane by lane.
template <class V>
MIXGRAD_ELEMENT void exp_reduced(const V& xc, V& n, V& y) {
  n = (xc * 1.44269504088896341f + 12582912.f) - 12582912.f;  // round to nearest
  const V f = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  V p = V{} + 1.9875691500e-4f;
  p = p * f + 1.3981999507e-3f;
  p = p * f + 8.3334519073e-3f;
  p = p * f + 4.1665795894e-2f;
  p = p * f + 1.6666665459e-1f;
  p = p * f + 5.0000001201e-1f;
  y = p * f * f + f + 1.f;
}

/// e^xc for xc in [-87, 88], where it is a normal float: exp_reduced, scaled
/// by 2^n through the exponent bits. The callers clamp (and so keep NaN from
/// the integer conversion) and handle what lies outside.
MIXGRAD_ELEMENT float exp_float_in_range(float xc) {
  float n, y;
  exp_reduced(xc, n, y);
  return y * detail::bits_float(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
}

/// e^x in float for x <= 0.5 (tanh's and GELU's use): exp_float_in_range;
/// within 2 ulp of expf, and 0 below -87 (where expf is denormal or 0); NaN
/// stays NaN. Plain arithmetic, so a loop of it vectorises where selects do
/// (a call to libm's expf does not).
MIXGRAD_ELEMENT float exp_float_nonpositive(float x) {
  const float e = exp_float_in_range(x >= -87.f ? x : -87.f);  // NaN too: no NaN reaches the integer conversion
  return x != x ? x : (x < -87.f ? 0.f : e);
}

/// e^x in float over the whole range: exp_reduced on x clamped to
/// [-104, 89], scaled by 2^n in two steps (each factor a normal float), so
/// that results below 2^-126 come out as correctly rounded subnormals and
/// those above the largest float as inf. Within 2 ulp of expf; NaN stays NaN.
MIXGRAD_ELEMENT float exp_float(float x) {
  const float xc = x >= -104.f ? (x <= 89.f ? x : 89.f) : -104.f;  // NaN -> -104
  float n, y;
  exp_reduced(xc, n, y);
  const int32_t k = static_cast<int32_t>(n);  // [-150, 128]
  const int32_t k1 = k >> 1, k2 = k - k1;     // each in [-75, 64]
  const float r = y * detail::bits_float(static_cast<uint32_t>(k1 + 127) << 23) *
                  detail::bits_float(static_cast<uint32_t>(k2 + 127) << 23);
  return x != x ? x : r;
}

/// The natural logarithm in float: x = 2^e m with m in [sqrt(1/2), sqrt(2)),
/// f = m - 1 (exact), and log(1 + f) = f - (f^2/2 - s (f^2/2 + R(s^2)))
/// with s = f / (2 + f) and R(z) = 2z/3 + 2z^2/5 + 2z^3/7 + 2z^4/9, the
/// series of 2 atanh(s) / s - 2 (the form of fdlibm's logf; |s| < 0.172, so
/// the series' tail is under 1e-9 of the result).
/// Subnormals are scaled by 2^23 first. log(0) = -inf, log(x < 0) = NaN,
/// log(inf) = inf; within 2 ulp of logf.
MIXGRAD_ELEMENT float log_float(float x) {
  const bool subnormal = x < 1.17549435e-38f;  // 0 and negatives too: the result is chosen below
  const float xs = subnormal ? x * 8388608.f : x;
  const uint32_t b = detail::float_bits(xs);
  const float m0 = detail::bits_float((b & 0x007fffffu) | 0x3f800000u);  // [1, 2)
  const bool halve = m0 > 1.41421356f;
  const float f = (halve ? 0.5f * m0 : m0) - 1.f;
  const float e = static_cast<float>(static_cast<int32_t>((b >> 23) & 0xffu) - 127 + (halve ? 1 : 0) -
                                     (subnormal ? 23 : 0));
  const float s = f / (2.f + f);
  const float z = s * s;
  const float r = z * (2.f / 3 + z * (2.f / 5 + z * (2.f / 7 + z * (2.f / 9))));
  const float hf = 0.5f * f * f;
  const float y = e * 0.693359375f + (f - (hf - (s * (hf + r) + e * -2.12194440e-4f)));
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  return x > 0.f ? (x < kInf ? y : x) : (x == 0.f ? -kInf : kNaN);  // NaN: x > 0 and x == 0 are false
}

/// log(1 + x) in float: u = 1 + x and log(u) x / (u - 1), which cancels the
/// rounding of 1 + x (Goldberg's form), or x itself where u rounds to 1
/// (keeps -0). log1p(-1) = -inf, below -1 NaN; within 3 ulp of log1pf.
MIXGRAD_ELEMENT float log1p_float(float x) {
  const float u = 1.f + x;
  const float y = log_float(u) * (x / (u - 1.f));
  constexpr float kInf = std::numeric_limits<float>::infinity();
  return u == 1.f ? x : (x == kInf ? x : y);
}

/// e^x - 1 in float: for |x| < 1/2 the Taylor series to x^8 (its tail is
/// under 2e-8 of the result there), written x (1 + x P(x)) so that -0 stays
/// -0; beyond, exp_float(x) - 1, which cancels at most one bit there.
/// Within 3 ulp of expm1f; NaN stays NaN, -inf gives -1.
MIXGRAD_ELEMENT float expm1_float(float x) {
  const float p =
      0.5f +
      x * (1.f / 6 + x * (1.f / 24 + x * (1.f / 120 + x * (1.f / 720 + x * (1.f / 5040 + x * (1.f / 40320))))));
  const float near_zero = x * (1.f + x * p);
  const float far = exp_float(x) - 1.f;
  return (x < 0.5f && x > -0.5f) ? near_zero : far;
}

/// The error function in float. |x| < 0.921875: x P(x^2), P of degree 5
/// fitted to erf(x) / x (relative error 1.6e-8); beyond, 1 - e^-x^2 Q(t)
/// with t = 1 / (1 + |x| / 2), Q of degree 6 fitted to erfc(x) e^x^2 on
/// [0.921875, 3.92] (3.4e-8); from 3.92 on erfc is under half an ulp of 1
/// and the same expression rounds to +-1. Both sides are computed and one
/// selected, so a loop of it vectorises. e^-x^2 is exp_float(-(x * x)), the
/// expression GELU's derivative writes for its density, so that a compiler
/// computes it once for both. Within 3 ulp of erff; NaN stays NaN, -0 stays
/// -0.
MIXGRAD_ELEMENT float erf_float(float x) {
  const float a = x < 0.f ? -x : x;
  const float z = x * x;
  const float near_zero =
      x * (1.12837911f + z * (-0.376124948f +
                              z * (0.112818182f + z * (-0.0267666765f + z * (0.00499325106f + z * -0.000599115563f)))));
  const float t = 1.f / (1.f + 0.5f * a);
  const float q =
      0.000642154599f +
      t * (0.273151129f +
           t * (0.333365053f + t * (0.0940468684f + t * (0.415363282f + t * (-0.0670632422f + t * -0.0501527973f)))));
  const float far = std::copysign(1.f - exp_float(-z) * q, x);  // |x| = inf: t = 0, e^-inf = 0
  return x != x ? x : (a < 0.921875f ? near_zero : far);
}

/// 1 / (1 + e^-x) in float without libm: e^-x by exp_reduced on -x clamped
/// to [-87, 88], scaled through the exponent bits, so a loop of it
/// vectorises (one of std::exp does not). Within a few ulp of the exact
/// value; exactly 1 from x = 17 on, and 0 below x = -88, where the exact
/// value is a subnormal under 6e-39. NaN stays NaN.
MIXGRAD_ELEMENT float sigmoid_float(float x) {
  const float t = -x;
  const float e = exp_float_in_range(t >= -87.f ? (t <= 88.f ? t : 88.f) : -87.f);  // NaN -> -87
  return x != x ? x : (t > 88.f ? 0.f : 1.f / (1.f + e));
}

/// tanh in float without libm's tanhf, which goes through expm1f and costs
/// several expf: an odd polynomial for |x| < 0.625 (coefficients fitted for
/// a relative error below 5e-9, far under float's rounding), 1 - 2 / (e^2|x| + 1)
/// beyond, where it has no cancellation to speak of. Both are computed and
/// one selected: no branch to mispredict on mixed-sign data. NaN selects the
/// second and stays NaN; large |x| gives exactly +-1.
MIXGRAD_ELEMENT float tanh_float(float x) {
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

}  // namespace mixgrad::kernels
