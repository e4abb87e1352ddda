// Element math of the FP8 formats (OCP 8-bit floating point, the formats of
// the tensor cores of NVIDIA's Ada and Hopper GPUs): rounding a float or a
// double to the nearest value of E4M3 or E5M2, shared by the CPU and CUDA
// kernels of backend/fp8.hpp.
//
//   E4M3 ("fn"): 4 exponent bits (bias 7), 3 mantissa bits, no infinity;
//                largest finite 448, smallest normal 2^-6, subnormals down to 2^-9.
//   E5M2:        5 exponent bits (bias 15), 2 mantissa bits, IEEE-like with
//                infinities; largest finite 57344, smallest normal 2^-14,
//                subnormals down to 2^-16.
//
//   float v = kernels::fp8_round(300.f, kernels::kE4M3);  // 288 (grid 32 there; 300 is nearer 288 than 320)
//
// Rounding is to nearest, ties to even. Finite values beyond the largest
// saturate to it (the saturating cast of Transformer Engine and torchao).
// NaN stays NaN; an infinity stays an infinity in E5M2 and becomes NaN in
// E4M3, which has none, so a non-finite value is never hidden as a finite one
// (a GradScaler still sees an overflow). The rounding adds and subtracts
// 1.5 * 2^(s + p) (p: the float's mantissa bits), whose ulp is the FP8 grid
// spacing 2^s at the value's binade: branch-free arithmetic, so loops of it
// vectorise.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/element_inline.hpp"

namespace mixgrad::kernels {

/// One FP8 format.
struct Fp8Params {
  int mantissa_bits;   // explicit mantissa bits
  int min_normal_exp;  // exponent of the smallest normal value
  float max_finite;    // the largest finite value
  bool has_inf;        // whether infinities exist (E5M2) or become NaN (E4M3)
};
inline constexpr Fp8Params kE4M3{3, -6, 448.0f, false};
inline constexpr Fp8Params kE5M2{2, -14, 57344.0f, true};

namespace fp8_detail {
template <class F>
struct Layout;
template <>
struct Layout<float> {
  using U = uint32_t;
  static constexpr int kMantissa = 23, kBias = 127;
  static constexpr U kExpMask = 0xffu;
};
template <>
struct Layout<double> {
  using U = uint64_t;
  static constexpr int kMantissa = 52, kBias = 1023;
  static constexpr U kExpMask = 0x7ffu;
};
template <class F>
MIXGRAD_ELEMENT typename Layout<F>::U to_bits(F v) {
  typename Layout<F>::U u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}
template <class F>
MIXGRAD_ELEMENT F from_bits(typename Layout<F>::U u) {
  F v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}
}  // namespace fp8_detail

/// x (a float or a double) rounded to the nearest value of format `p`, as
/// the file comment says; the result is exactly an FP8 value (or NaN / inf).
/// Every choice is a select of integers: a float select next to a possibly
/// trapping subtraction keeps GCC from vectorising the loop.
template <class F>
MIXGRAD_ELEMENT F fp8_round(F x, const Fp8Params& p) {
  using L = fp8_detail::Layout<F>;
  using U = typename L::U;
  constexpr U kSign = U(1) << (sizeof(U) * 8 - 1);
  constexpr U kInf = L::kExpMask << L::kMantissa;
  constexpr U kQuietNan = kInf | (U(1) << (L::kMantissa - 1));
  const U bits = fp8_detail::to_bits(x);
  const U a = bits & ~kSign;  // |x|: for non-negative floats the bits order as the values
  const U max = fp8_detail::to_bits(static_cast<F>(p.max_finite));
  const U sat = a > max ? max : a;  // finite, in [0, max]
  const int32_t e = static_cast<int32_t>(sat >> L::kMantissa) - L::kBias;
  const int32_t spacing = (e > p.min_normal_exp ? e : p.min_normal_exp) - p.mantissa_bits;
  // 1.5 * 2^(spacing + mantissa): its ulp is 2^spacing.
  const F magic = fp8_detail::from_bits<F>((static_cast<U>(spacing + L::kBias + L::kMantissa) << L::kMantissa) |
                                           (U(1) << (L::kMantissa - 1)));
  const U rounded = fp8_detail::to_bits((fp8_detail::from_bits<F>(sat) + magic) - magic);
  // Masks, not branches: the sum above must not move into one (GCC then
  // sees an addition that may trap and keeps the loop scalar).
  const U keep = U(0) - static_cast<U>(a < kInf);  // finite
  const U inf = p.has_inf ? kInf : kQuietNan;      // E4M3 has no infinity
  const U special = a == kInf ? inf : kQuietNan;
  return fp8_detail::from_bits<F>((rounded & keep) | (special & ~keep) | (bits & kSign));
}

/// The 8-bit code of `v`, a value of format `p` (fp8_round's result) or NaN /
/// an infinity: sign, exponent (bias 1 - min_normal_exp), mantissa; NaN is
/// 0x7f (either sign), an infinity 0x7c (E5M2). The layout cuBLASLt reads.
MIXGRAD_ELEMENT uint8_t fp8_encode(float v, const Fp8Params& p) {
  const uint32_t bits = fp8_detail::to_bits(v);
  const uint32_t sign = (bits >> 24) & 0x80u, a = bits & 0x7fffffffu;
  const int32_t e = static_cast<int32_t>(a >> 23) - 127;
  const uint32_t normal = (static_cast<uint32_t>(e + 1 - p.min_normal_exp) << p.mantissa_bits) |
                          ((a & 0x7fffffu) >> (23 - p.mantissa_bits));
  // Below the smallest normal: the value in units of the smallest subnormal, exact.
  const uint32_t unit_exp = static_cast<uint32_t>(127 + p.mantissa_bits - p.min_normal_exp);
  const float unit = fp8_detail::from_bits<float>(unit_exp << 23);
  // Normal values, infinities and NaN count as 0 here (their code comes from
  // the other arms): converting them would be out of uint32's range.
  const uint32_t below_normal = e >= p.min_normal_exp ? 0u : a;
  const uint32_t subnormal = static_cast<uint32_t>(fp8_detail::from_bits<float>(below_normal) * unit);
  const uint32_t finite = e >= p.min_normal_exp ? normal : subnormal;
  const uint32_t special = a == 0x7f800000u && p.has_inf ? 0x7cu : 0x7fu;
  return static_cast<uint8_t>((a >= 0x7f800000u ? special : finite) | sign);
}

/// The value of the 8-bit code `c` of format `p` (fp8_encode's inverse).
MIXGRAD_ELEMENT float fp8_decode(uint8_t c, const Fp8Params& p) {
  const int exp_bits = 7 - p.mantissa_bits;
  const uint32_t e = (static_cast<uint32_t>(c) >> p.mantissa_bits) & ((1u << exp_bits) - 1u);
  const uint32_t m = static_cast<uint32_t>(c) & ((1u << p.mantissa_bits) - 1u);
  const float subnormal_unit =
      fp8_detail::from_bits<float>(static_cast<uint32_t>(127 + p.min_normal_exp - p.mantissa_bits) << 23);
  const float subnormal = static_cast<float>(m) * subnormal_unit;
  const uint32_t normal_exp = static_cast<uint32_t>(static_cast<int32_t>(e) - (1 - p.min_normal_exp) + 127);
  const float normal = fp8_detail::from_bits<float>((normal_exp << 23) | (m << (23 - p.mantissa_bits)));
  const uint32_t top = (1u << exp_bits) - 1u;
  const bool nan = p.has_inf ? (e == top && m != 0) : (e == top && m == (1u << p.mantissa_bits) - 1u);
  const bool inf = p.has_inf && e == top && m == 0;
  const uint32_t magnitude = nan ? 0x7fc00000u : inf ? 0x7f800000u : fp8_detail::to_bits(e == 0 ? subnormal : normal);
  return fp8_detail::from_bits<float>(magnitude | (static_cast<uint32_t>(c & 0x80u) << 24));
}

}  // namespace mixgrad::kernels
