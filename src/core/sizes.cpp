#include "core/sizes.hpp"

#include "mixgrad/error.hpp"

namespace mixgrad::sizes {

void throw_overflow(std::string_view op, const std::string& what) {
  throw ShapeError(std::string(op) + ": size overflow: " + what + " does not fit in int64");
}

bool span(const Shape& s, int64_t& out) {
  int64_t n = 1;
  for (int64_t d : s)
    if (d != 0 && __builtin_mul_overflow(n, d, &n)) return false;
  out = n;
  return true;
}

int64_t numel(const Shape& s, std::string_view op) {
  bool has_zero = false;
  for (int64_t d : s) {
    if (d < 0) throw ShapeError(std::string(op) + ": negative extent in shape " + to_string(s));
    has_zero = has_zero || d == 0;
  }
  int64_t n;
  if (!span(s, n))
    throw ShapeError(std::string(op) + ": shape " + to_string(s) + " has more elements than fit in int64");
  return has_zero ? 0 : n;
}

int64_t nbytes(const Shape& s, DType dtype, std::string_view op) {
  const int64_t n = numel(s, op);
  int64_t extent_bytes;
  span(s, extent_bytes);  // cannot fail: numel() checked it
  if (__builtin_mul_overflow(extent_bytes, static_cast<int64_t>(element_size(dtype)), &extent_bytes))
    throw ShapeError(std::string(op) + ": a " + std::string(to_string(dtype)) + " tensor of shape " + to_string(s) +
                     " is too large: its bytes (or byte strides) do not fit in int64");
  return n * static_cast<int64_t>(element_size(dtype));
}

}  // namespace mixgrad::sizes
