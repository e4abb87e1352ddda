// Element conversion between any two mixgrad element types, through float
// (or double for float64 / 64-bit integers) with round-to-nearest-even into
// the 16-bit floats.
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
  } else if constexpr (std::is_same_v<To, half> || std::is_same_v<To, bfloat16>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_same_v<From, half> || std::is_same_v<From, bfloat16>) {
    return static_cast<To>(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace mixgrad::kernels
