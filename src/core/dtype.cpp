#include "mixgrad/dtype.hpp"

#include <charconv>

#include "mixgrad/device.hpp"
#include "mixgrad/error.hpp"

namespace mixgrad {

std::string_view to_string(DType t) {
  switch (t) {
    case DType::float32: return "float32";
    case DType::float16: return "float16";
    case DType::bfloat16: return "bfloat16";
    case DType::float64: return "float64";
    case DType::int32: return "int32";
    case DType::int64: return "int64";
    case DType::bool_: return "bool";
    case DType::int8: return "int8";
    case DType::uint8: return "uint8";
  }
  return "invalid";
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << to_string(t); }

namespace {
int rank(DType t) {
  switch (t) {
    case DType::bool_: return 0;
    case DType::int8: return 1;
    case DType::uint8: return 1;
    case DType::int32: return 2;
    case DType::int64: return 3;
    case DType::float16: return 4;
    case DType::bfloat16: return 4;
    case DType::float32: return 5;
    case DType::float64: return 6;
  }
  return -1;
}
}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (is_low_precision(a) && is_low_precision(b)) return DType::float32;
  // No int16: the smallest signed type that holds both int8 and uint8 is int32.
  if ((a == DType::int8 && b == DType::uint8) || (a == DType::uint8 && b == DType::int8)) return DType::int32;
  return rank(a) >= rank(b) ? a : b;
}

std::string to_string(Device d) {
  return d.is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(d.index());
}

std::ostream& operator<<(std::ostream& os, Device d) { return os << to_string(d); }

Device parse_device(std::string_view text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda") return Device::cuda(0);
  constexpr std::string_view prefix = "cuda:";
  if (text.starts_with(prefix)) {
    const std::string_view digits = text.substr(prefix.size());
    int index = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (!digits.empty() && digits.front() != '-' && digits.front() != '+' && ec == std::errc() &&
        end == digits.data() + digits.size())
      return Device::cuda(index);
  }
  throw ValueError("parse_device: '" + std::string(text) + "' is not a device; expected cpu, cuda or cuda:N");
}

}  // namespace mixgrad
