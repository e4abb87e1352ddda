// F::prelu composed of F:: ops (reshape, mul, gt, where): each is
// differentiable (twice, too) and dispatched to its inputs' device, so the
// op needs no kernel of its own. It reads x twice and writes one temporary
// (weight * x) more than a fused kernel would; left for later.
#include <string>

#include "mixgrad/error.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/nn.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

constexpr const char* kOp = "prelu";

template <class E>
[[noreturn]] void fail(const std::string& why, const Tensor& x, const Tensor& w) {
  throw E(std::string(kOp) + ": " + why + " (x " + ops::describe(x) + ", weight " + ops::describe(w) + ")");
}

void check(const Tensor& x, const Tensor& w) {
  ops::check_defined(kOp, {&x, &w});
  ops::check_same_device(kOp, {&x, &w});
  if (!is_floating_point(x.dtype()) || !is_floating_point(w.dtype()))
    fail<DTypeError>("x and weight must be floating", x, w);
  if (x.dtype() != w.dtype() && !amp::detail::autocast_active()) fail<DTypeError>("x and weight dtypes differ", x, w);
  if (w.ndim() > 1) fail<ShapeError>("weight must be 0-d or 1-d", x, w);
  if (w.numel() == 1) return;
  if (x.ndim() < 2) fail<ShapeError>("a weight of several slopes needs x with a channel dim 1", x, w);
  if (w.numel() != x.size(1))
    fail<ShapeError>("weight must have 1 or C = " + std::to_string(x.size(1)) + " elements", x, w);
}

}  // namespace

Tensor prelu(const Tensor& x_in, const Tensor& w_in) {
  check(x_in, w_in);
  Tensor x = x_in, w = w_in;
  amp::autocast_inputs(OpKind::prelu, {&x, &w});
  const amp::detail::AutocastOff composed;
  Shape slopes(std::vector<int64_t>(static_cast<size_t>(x.ndim()), 1));
  if (w.numel() > 1) slopes[1] = w.numel();
  return where(gt(x, 0.0), x, mul(reshape(w, slopes), x));
}

}  // namespace mixgrad::F
