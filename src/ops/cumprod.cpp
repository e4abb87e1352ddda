// F::cumprod composed of F:: ops: a Hillis-Steele scan, log2(n) steps of
// out = out * (out shifted by s along the axis, ones shifted in), s = 1, 2,
// 4, ... Every step is a product of tracked tensors, so the gradient is the
// product rule's, exact where x has zeros (unlike out / x or the exp of a
// running sum of logs), and differentiable again. It reads and writes the
// tensor log2(n) times where a running kernel would once; left for later.
#include "mixgrad/ops/cumprod.hpp"

#include <algorithm>

#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

Tensor cumprod(const Tensor& x_in, int dim) {
  constexpr const char* op = "cumprod";
  ops::check_defined(op, {&x_in});
  ops::check_floating(op, x_in);
  const int d = normalize_axis(dim, std::max(x_in.ndim(), 1), op);
  Tensor x = x_in;
  amp::autocast_inputs(OpKind::cumprod, {&x});
  const amp::detail::AutocastOff composed;
  const int64_t n = x.ndim() == 0 ? 1 : x.size(d);
  if (n <= 1) return mul(x, 1.0);  // a new tensor, as PyTorch's
  Tensor out = x;
  for (int64_t s = 1; s < n; s *= 2) {
    Shape ones_shape = x.shape();
    ones_shape[d] = s;
    const Tensor shifted = concat({ones(ones_shape, x.dtype(), x.device()), narrow(out, d, 0, n - s)}, d);
    out = mul(out, shifted);
  }
  return out;
}

}  // namespace mixgrad::F
