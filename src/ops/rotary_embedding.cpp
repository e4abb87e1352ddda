// Rotary position embeddings composed of F:: ops (narrow, mul, sub, add,
// concat, astype): each is differentiable (twice, too) and dispatched to the
// device of its inputs, so the composition needs no kernel of its own. It
// reads x twice and writes the result once more than a fused kernel would.
#include "mixgrad/ops/rotary_embedding.hpp"

#include <string>

#include "mixgrad/error.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

constexpr const char* kOp = "rotary_embedding";

template <class E>
[[noreturn]] void fail(const std::string& why, const Tensor& x, const Tensor& cos, const Tensor& sin) {
  throw E(std::string(kOp) + ": " + why + " (x " + ops::describe(x) + ", cos " + ops::describe(cos) + ", sin " +
          ops::describe(sin) + ")");
}

void check_dtypes(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  for (const Tensor* t : {&x, &cos, &sin})
    if (!is_floating_point(t->dtype())) fail<DTypeError>("every input must be floating", x, cos, sin);
}

void check_shapes(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  if (x.ndim() < 2) fail<ShapeError>("x must be [..., T, D] (at least 2-D)", x, cos, sin);
  const int64_t D = x.size(-1), T = x.size(-2);
  if (D % 2 != 0) fail<ShapeError>("the head dim D (x's last) must be even to pair its halves", x, cos, sin);
  if (cos.shape() != sin.shape()) fail<ShapeError>("cos and sin must have the same shape", x, cos, sin);
  if (cos.ndim() < 2 || cos.ndim() > x.ndim() || cos.size(-1) != D / 2 || cos.size(-2) != T)
    fail<ShapeError>("cos and sin must be [..., T, D/2] = [..., " + std::to_string(T) + ", " +
                         std::to_string(D / 2) + "]",
                     x, cos, sin);
  for (int i = 3; i <= cos.ndim(); ++i)
    if (cos.size(-i) != 1 && cos.size(-i) != x.size(-i))
      fail<ShapeError>("the leading dims of cos and sin must broadcast against x's", x, cos, sin);
}

}  // namespace

Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  ops::check_defined(kOp, {&x, &cos, &sin});
  check_dtypes(x, cos, sin);
  check_shapes(x, cos, sin);
  ops::check_same_device(kOp, {&x, &cos, &sin});
  const int last = x.ndim() - 1;
  const int64_t half = x.size(-1) / 2;
  const Tensor x1 = narrow(x, last, 0, half), x2 = narrow(x, last, half, half);
  // mul promotes a 16-bit x against float32 tables (autocast or not): the
  // rotation runs in float32 and the result is rounded to x's dtype once.
  const Tensor y1 = sub(mul(x1, cos), mul(x2, sin));
  const Tensor y2 = add(mul(x2, cos), mul(x1, sin));
  const Tensor y = concat({y1, y2}, last);
  return y.dtype() == x.dtype() ? y : astype(y, x.dtype());
}

}  // namespace mixgrad::F
