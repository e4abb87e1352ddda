// Checked size arithmetic. Every extent, element count, byte count, stride
// and offset that mixgrad derives from user input (a shape, a padding, a
// feature count, a narrow's start) is computed with these, so a size that
// does not fit in int64 is a ShapeError naming the op, never a wrapped-around
// value that allocates a small block and is then written far past its end.
//
//   auto ctx = [&] { return "input " + core::describe(x) + " with padding " + std::to_string(pad); };
//   const int64_t padded = sizes::add(h, sizes::mul(2, pad, "conv2d", ctx), "conv2d", ctx);
//   sizes::nbytes(out_shape, dtype, "conv2d");  // before empty(out_shape, dtype)
//
// The invariant they keep: every tensor's shape has no negative extent, and
// the product of its nonzero extents times its element size fits in int64.
// So its element count, byte count, contiguous strides and every product of a
// subset of its extents fit too, and kernels may multiply those unchecked.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "mixgrad/dtype.hpp"
#include "mixgrad/shape.hpp"

namespace mixgrad::sizes {

/// Throws ShapeError "<op>: size overflow: <what> does not fit in int64".
[[noreturn]] void throw_overflow(std::string_view op, const std::string& what);

/// One checked operation: a op b by `overflows` (a __builtin_*_overflow),
/// or a ShapeError naming `op` and `context()` (a callable returning the
/// operands' description; called only on overflow, so it costs nothing on
/// the normal path).
template <class Overflows>
struct Checked {
  Overflows overflows;
  template <class Context>
  int64_t operator()(int64_t a, int64_t b, std::string_view op, Context&& context) const {
    int64_t r;
    if (overflows(a, b, &r)) [[unlikely]]
      throw_overflow(op, context());
    return r;
  }
};
template <class Overflows>
Checked(Overflows) -> Checked<Overflows>;  // clang 14 does not deduce an aggregate's arguments itself

/// a * b, a + b and a - b, checked.
inline constexpr Checked mul{[](int64_t a, int64_t b, int64_t* r) { return __builtin_mul_overflow(a, b, r); }};
inline constexpr Checked add{[](int64_t a, int64_t b, int64_t* r) { return __builtin_add_overflow(a, b, r); }};
inline constexpr Checked sub{[](int64_t a, int64_t b, int64_t* r) { return __builtin_sub_overflow(a, b, r); }};

/// The product of the nonzero extents of `s` in `out`; false when it does
/// not fit in int64. The one place the extents of a shape are multiplied.
bool span(const Shape& s, int64_t& out);

/// Element count of a shape a tensor is to have: throws ShapeError naming
/// `op` and the shape for a negative extent or a count that overflows.
int64_t numel(const Shape& s, std::string_view op);

/// Byte count of a tensor of shape `s` and `dtype`; checks what numel()
/// checks, and that the bytes (and byte strides) fit in int64.
int64_t nbytes(const Shape& s, DType dtype, std::string_view op);

}  // namespace mixgrad::sizes
