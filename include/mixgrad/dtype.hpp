// mixgrad/dtype.hpp — element types of a tensor.
//
//   mg::DType t = mg::DType::bfloat16;
//   mg::to_string(t);              // "bfloat16"
//   mg::is_floating_point(t);      // true
//   mg::element_size(t);           // 2
//   mg::visit_dtype(t, []<class T>() { /* T is mg::bfloat16 */ });
#pragma once

#include <cstdint>
#include <ostream>
#include <string_view>

#include "mixgrad/error.hpp"
#include "mixgrad/half.hpp"

namespace mixgrad {

// New values go at the end: checkpoints and the distributed wire format store
// the enumerator's number.
enum class DType : uint8_t { float32, float16, bfloat16, float64, int32, int64, bool_, int8, uint8 };

/// The name PyTorch and MegEngine users know: "float32", "bfloat16", "bool".
std::string_view to_string(DType t);
std::ostream& operator<<(std::ostream& os, DType t);

/// Bytes per element.
constexpr int64_t element_size(DType t) {
  switch (t) {
    case DType::float32: return 4;
    case DType::float16: return 2;
    case DType::bfloat16: return 2;
    case DType::float64: return 8;
    case DType::int32: return 4;
    case DType::int64: return 8;
    case DType::bool_: return 1;
    case DType::int8: return 1;
    case DType::uint8: return 1;
  }
  return 0;
}

constexpr bool is_floating_point(DType t) {
  return t == DType::float32 || t == DType::float16 || t == DType::bfloat16 || t == DType::float64;
}

/// float16 or bfloat16.
constexpr bool is_low_precision(DType t) { return t == DType::float16 || t == DType::bfloat16; }

/// True for int8, uint8, int32 and int64 (not bool).
constexpr bool is_integral(DType t) {
  return t == DType::int8 || t == DType::uint8 || t == DType::int32 || t == DType::int64;
}

/// The dtype that holds both a and b without loss in the usual sense
/// (float64 > float32 > {float16, bfloat16} > int64 > int32 > {int8, uint8} > bool;
/// float16 with bfloat16 gives float32, and int8 with uint8 gives int32, since
/// there is no int16: PyTorch gives int16 there).
DType promote_types(DType a, DType b);

/// The C++ type that stores one element of a dtype.
template <DType D> struct dtype_traits;
template <> struct dtype_traits<DType::float32> { using type = float; };
template <> struct dtype_traits<DType::float16> { using type = half; };
template <> struct dtype_traits<DType::bfloat16> { using type = bfloat16; };
template <> struct dtype_traits<DType::float64> { using type = double; };
template <> struct dtype_traits<DType::int32> { using type = int32_t; };
template <> struct dtype_traits<DType::int64> { using type = int64_t; };
template <> struct dtype_traits<DType::bool_> { using type = bool; };
template <> struct dtype_traits<DType::int8> { using type = int8_t; };
template <> struct dtype_traits<DType::uint8> { using type = uint8_t; };

/// The dtype of a C++ element type.
template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::float32; }
template <> constexpr DType dtype_of<half>() { return DType::float16; }
template <> constexpr DType dtype_of<bfloat16>() { return DType::bfloat16; }
template <> constexpr DType dtype_of<double>() { return DType::float64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::int32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::int64; }
template <> constexpr DType dtype_of<bool>() { return DType::bool_; }
template <> constexpr DType dtype_of<int8_t>() { return DType::int8; }
template <> constexpr DType dtype_of<uint8_t>() { return DType::uint8; }

/// Calls `f.template operator()<T>()` with T the element type of `t`.
template <class F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::float32: return f.template operator()<float>();
    case DType::float16: return f.template operator()<half>();
    case DType::bfloat16: return f.template operator()<bfloat16>();
    case DType::float64: return f.template operator()<double>();
    case DType::int32: return f.template operator()<int32_t>();
    case DType::int64: return f.template operator()<int64_t>();
    case DType::bool_: return f.template operator()<bool>();
    case DType::int8: return f.template operator()<int8_t>();
    case DType::uint8: return f.template operator()<uint8_t>();
  }
  throw DTypeError("visit_dtype: invalid dtype");
}

/// As visit_dtype, for the four floating dtypes only; others throw DTypeError
/// naming `op`.
template <class F>
decltype(auto) visit_floating(DType t, std::string_view op, F&& f) {
  switch (t) {
    case DType::float32: return f.template operator()<float>();
    case DType::float16: return f.template operator()<half>();
    case DType::bfloat16: return f.template operator()<bfloat16>();
    case DType::float64: return f.template operator()<double>();
    default: break;
  }
  throw DTypeError(std::string(op) + ": expected a floating dtype, got " + std::string(to_string(t)));
}

}  // namespace mixgrad
