// Float versions of e^x and tanh written as plain arithmetic, so that a loop
// of them vectorises (a call to libm's expf or tanhf does not). Used by the
// unary functors (kernels/unary.hpp, through kernels::math) and the CPU's
// vector exponential (backend/cpu/vector_exp.hpp).
//
//   float y = kernels::tanh_float(0.5f);   // tanh(0.5) within float rounding
#pragma once

#include <cmath>
#include <cstdint>

#include "mixgrad/half.hpp"

namespace mixgrad::kernels {

/// e^xc = y 2^n for xc in [-87, 0.5]: n = round(xc / ln 2) and y = e^(xc - n ln 2)
/// by Cephes' degree-6 polynomial. Written on V = float or a GCC vector of
/// floats, so that the CPU kernels' vector exponential
/// (backend/cpu/vector_exp.hpp) runs the same arithmetic lane by lane.
template <class V>
MIXGRAD_HOST_DEVICE inline void exp_reduced(const V& xc, V& n, V& y) {
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
MIXGRAD_HOST_DEVICE inline float exp_float_in_range(float xc) {
  float n, y;
  exp_reduced(xc, n, y);
  return y * detail::bits_float(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
}

/// e^x in float for x <= 0.5 (tanh's and GELU's use): exp_float_in_range;
/// within 2 ulp of expf, and 0 below -87 (where expf is denormal or 0); NaN
/// stays NaN. Plain arithmetic, so a loop of it vectorises where selects do
/// (a call to libm's expf does not).
MIXGRAD_HOST_DEVICE inline float exp_float_nonpositive(float x) {
  const float e = exp_float_in_range(x >= -87.f ? x : -87.f);  // NaN too: no NaN reaches the integer conversion
  return x != x ? x : (x < -87.f ? 0.f : e);
}

/// 1 / (1 + e^-x) in float without libm: e^-x by exp_reduced on -x clamped
/// to [-87, 88], scaled through the exponent bits, so a loop of it
/// vectorises (one of std::exp does not). Within a few ulp of the exact
/// value; exactly 1 from x = 17 on, and 0 below x = -88, where the exact
/// value is a subnormal under 6e-39. NaN stays NaN.
MIXGRAD_HOST_DEVICE inline float sigmoid_float(float x) {
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

}  // namespace mixgrad::kernels
