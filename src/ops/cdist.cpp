// F::cdist composed of F:: ops, as torch.cdist. p = 2 either by the matrix
// product (PyTorch's _euclidean_dist: ||a||² + ||b||² - 2 a·b, clamped at
// 0) or by the differences; other p by the differences [.., P, R, M]. Where
// a distance is 0 its gradient is 0 (PyTorch's _cdist_backward and
// _euclidean_dist_backward): the root and the |d|^p are taken of a value
// made safe at 0 (the two-`where` idiom), so no inf or NaN reaches the
// gradient and the second derivative stays finite. Autocast applies cdist's
// entry (float32) and the parts run with autocast off.
#include "mixgrad/ops/distance.hpp"

#include <cmath>
#include <string>

#include "mixgrad/error.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/linalg.hpp"
#include "mixgrad/ops/reduction.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

constexpr const char* kOp = "cdist";

template <class E>
[[noreturn]] void fail(const std::string& why, const Tensor& x1, const Tensor& x2, double p) {
  throw E(std::string(kOp) + ": " + why + " (x1 " + ops::describe(x1) + ", x2 " + ops::describe(x2) +
          ", p = " + std::to_string(p) + ")");
}

void check(const Tensor& x1, const Tensor& x2, double p) {
  ops::check_defined(kOp, {&x1, &x2});
  ops::check_same_device(kOp, {&x1, &x2});
  if (!is_floating_point(x1.dtype()) || !is_floating_point(x2.dtype()))
    fail<DTypeError>("x1 and x2 must be floating", x1, x2, p);
  if (x1.dtype() != x2.dtype() && !amp::detail::autocast_active()) fail<DTypeError>("x1 and x2 dtypes differ", x1, x2, p);
  if (x1.ndim() < 2 || x2.ndim() < 2) fail<ShapeError>("x1 and x2 must have at least 2 dims", x1, x2, p);
  if (x1.size(-1) != x2.size(-1)) fail<ShapeError>("x1 and x2 must have the same number of columns", x1, x2, p);
  if (!(p >= 0)) fail<ValueError>("p must be >= 0", x1, x2, p);
  Shape b1 = x1.shape(), b2 = x2.shape();
  b1.erase(b1.ndim() - 1), b1.erase(b1.ndim() - 1), b2.erase(b2.ndim() - 1), b2.erase(b2.ndim() - 1);
  (void)broadcast_shapes(b1, b2, kOp);
}

// f(v) where v > 0, 0 elsewhere, with a gradient of 0 there.
template <class Fn>
Tensor where_positive(const Tensor& v, Fn f) {
  const Tensor positive = gt(v, 0.0);
  return where(positive, f(where(positive, v, ones_like(v))), zeros_like(v));
}

Tensor euclidean_by_matmul(const Tensor& x1, const Tensor& x2) {
  const Tensor n1 = sum(mul(x1, x1), -1, true);               // [.., P, 1]
  const Tensor n2 = unsqueeze(sum(mul(x2, x2), -1), -2);      // [.., 1, R]
  const Tensor d2 = add(add(n1, n2), mul(matmul(x1, transpose(x2, -1, -2)), -2.0));
  return where_positive(d2, [](const Tensor& v) { return sqrt(v); });
}

}  // namespace

Tensor cdist(const Tensor& x1_in, const Tensor& x2_in, double p, CdistMode mode) {
  check(x1_in, x2_in, p);
  Tensor x1 = x1_in, x2 = x2_in;
  amp::autocast_inputs(OpKind::cdist, {&x1, &x2});
  const amp::detail::AutocastOff composed;
  if (p == 2.0) {
    const bool large = x1.size(-2) > 25 || x2.size(-2) > 25;
    if (mode == CdistMode::use_mm_for_euclid_dist ||
        (mode == CdistMode::use_mm_for_euclid_dist_if_necessary && large))
      return euclidean_by_matmul(x1, x2);
  }
  // [.., P, R, M]; an add of the negation, as F::sub's backward is not
  // recorded as differentiable again when x2 needs no gradient.
  const Tensor diff = add(unsqueeze(x1, -2), neg(unsqueeze(x2, -3)));
  if (p == 0.0) return sum(astype(ne(diff, zeros_like(diff)), diff.dtype()), -1);
  const Tensor a = abs(diff);
  if (p == 1.0) return sum(a, -1);
  if (std::isinf(p)) return max(a, -1);
  if (p == 2.0) return where_positive(sum(mul(diff, diff), -1), [](const Tensor& v) { return sqrt(v); });
  const Tensor powered = where_positive(a, [p](const Tensor& v) { return pow(v, p); });
  return where_positive(sum(powered, -1), [p](const Tensor& v) { return pow(v, 1.0 / p); });
}

}  // namespace mixgrad::F
