// Element conversion between any two mixgrad element types, through float
// (or double for float64 / 64-bit integers) with round-to-nearest-even into
// the 16-bit floats.
//
// Floating values go to int8 / uint8 as PyTorch's CPU kernels do in practice:
// truncated toward zero to int64, then narrowed modulo 256 (300.0 -> int8 44,
// -1.0 -> uint8 255). PyTorch leaves out-of-range conversions undefined; here
// they are defined: NaN, and values outside int64's range, give 0. Integer
// narrowing (int32 -> int8) wraps modulo 256, as in C++20 and PyTorch.
#pragma once

#include <cstdint>
#include <type_traits>

#include "mixgrad/half.hpp"

namespace mixgrad::kernels {

/// The type arithmetic on T is carried out in: float for 16-bit floats.
template <class T> struct compute_type { using type = T; };
template <> struct compute_type<half> { using type = float; };
template <> struct compute_type<bfloat16> { using type = float; };
template <> struct compute_type<bool> { using type = float; };
template <class T> using compute_t = typename compute_type<T>::type;

template <class To, class From>
MIXGRAD_HOST_DEVICE inline To cast(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<float>(v) != 0.0f;
  } else if constexpr ((std::is_same_v<To, int8_t> || std::is_same_v<To, uint8_t>) &&
                       !std::is_integral_v<From>) {
    // From is floating: NaN fails both comparisons; 2^63 is exact in float.
    using F = std::conditional_t<std::is_same_v<From, double>, double, float>;
    const F f = static_cast<F>(v);
    const int64_t w = (f > F(-9223372036854775808.0) && f < F(9223372036854775808.0)) ? static_cast<int64_t>(f) : 0;
    return static_cast<To>(w);
  } else if constexpr (std::is_same_v<To, half> || std::is_same_v<To, bfloat16>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_same_v<From, half> || std::is_same_v<From, bfloat16>) {
    return static_cast<To>(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace mixgrad::kernels
