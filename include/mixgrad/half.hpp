// mixgrad/half.hpp — host 16-bit floating types: IEEE binary16 (`half`) and
// bfloat16 (`bfloat16`).
//
// Conversions from float round to nearest even, keep NaN a NaN (quiet), keep
// infinities and produce / read subnormals exactly. Arithmetic happens in
// float: both types convert implicitly to float and explicitly from it.
//
//   mg::half h(0.1f);            // nearest binary16 to 0.1
//   float back = h;              // 0.0999755859375
//   mg::bfloat16 b = mg::bfloat16::from_bits(0x7f80);  // +inf
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MIXGRAD_HOST_DEVICE __host__ __device__
#else
#define MIXGRAD_HOST_DEVICE
#endif

namespace mixgrad {

namespace detail {

MIXGRAD_HOST_DEVICE inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

MIXGRAD_HOST_DEVICE inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// float -> binary16 bits, round to nearest even.
MIXGRAD_HOST_DEVICE inline uint16_t float_to_half_bits(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x0200u | ((abs >> 13) & 0x3ffu) : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {  // result is subnormal or zero
    // Add 0.5 (as a float with the right exponent) so that the FPU does the
    // round-to-nearest-even of the mantissa for us.
    const float magic = bits_float(0x3f000000u);  // 0.5: aligns 2^-24 to the last mantissa bit
    const float r = bits_float(abs) + magic;
    return static_cast<uint16_t>(sign | (float_bits(r) - 0x3f000000u));
  }
  const uint32_t mant_odd = (abs >> 13) & 1u;
  uint32_t r = abs + 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round
  return static_cast<uint16_t>(sign | (r >> 13));
}

/// binary16 bits -> float (exact).
MIXGRAD_HOST_DEVICE inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return bits_float(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    // subnormal or zero: value = mant * 2^-24, exact in float
    const float v = static_cast<float>(mant) * bits_float(0x33800000u);  // 2^-24
    return bits_float(sign | float_bits(v));
  }
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

/// float -> bfloat16 bits, round to nearest even; NaN stays a quiet NaN.
MIXGRAD_HOST_DEVICE inline uint16_t float_to_bfloat16_bits(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

MIXGRAD_HOST_DEVICE inline float bfloat16_bits_to_float(uint16_t b) {
  return bits_float(static_cast<uint32_t>(b) << 16);
}

}  // namespace detail

/// IEEE 754 binary16. Stored as its bits; converts to float exactly.
struct half {
  uint16_t bits = 0;

  half() = default;
  MIXGRAD_HOST_DEVICE explicit half(float f) : bits(detail::float_to_half_bits(f)) {}
  MIXGRAD_HOST_DEVICE explicit half(double d) : half(static_cast<float>(d)) {}
  MIXGRAD_HOST_DEVICE operator float() const { return detail::half_bits_to_float(bits); }
  MIXGRAD_HOST_DEVICE static half from_bits(uint16_t b) {
    half h;
    h.bits = b;
    return h;
  }
};

/// bfloat16: the upper half of a float32. Stored as its bits.
struct bfloat16 {
  uint16_t bits = 0;

  bfloat16() = default;
  MIXGRAD_HOST_DEVICE explicit bfloat16(float f) : bits(detail::float_to_bfloat16_bits(f)) {}
  MIXGRAD_HOST_DEVICE explicit bfloat16(double d) : bfloat16(static_cast<float>(d)) {}
  MIXGRAD_HOST_DEVICE operator float() const { return detail::bfloat16_bits_to_float(bits); }
  MIXGRAD_HOST_DEVICE static bfloat16 from_bits(uint16_t b) {
    bfloat16 h;
    h.bits = b;
    return h;
  }
};

/// Bulk conversions, vectorised (F16C / AVX-512) where the CPU has it.
void convert(const float* src, half* dst, int64_t n);
void convert(const half* src, float* dst, int64_t n);
void convert(const float* src, bfloat16* dst, int64_t n);
void convert(const bfloat16* src, float* dst, int64_t n);

}  // namespace mixgrad
