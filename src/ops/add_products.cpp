// F::addmm, F::baddbmm and F::addbmm (PyTorch's): beta * input + alpha *
// product, composed of F:: ops (matmul, reshape, permute, mul, add). Each is
// differentiable (twice, too) and dispatched to its inputs' device through
// the ops it is made of, so it needs no kernel of its own. Autocast applies
// the op's own entry first (low precision, as PyTorch's CPU and CUDA lists),
// then runs the composition with autocast off so that nothing inside casts
// again. A fused kernel (the gemm's C = beta C + alpha A·B epilogue) would
// save one pass over the output; left for later.
#include <cmath>
#include <string>

#include "mixgrad/error.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/linalg.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

struct Operands {
  const char* op;
  const char* names[3];
  const Tensor* t[3];

  std::string describe() const {
    std::string s = " (";
    for (int i = 0; i < 3; ++i) s += std::string(i ? ", " : "") + names[i] + " " + ops::describe(*t[i]);
    return s + ")";
  }
  template <class E>
  [[noreturn]] void fail(const std::string& why) const {
    throw E(std::string(op) + ": " + why + describe());
  }
};

// Defined, floating, one device, one dtype (unless autocast will cast them).
void check_common(const Operands& o) {
  ops::check_defined(o.op, {o.t[0], o.t[1], o.t[2]});
  ops::check_same_device(o.op, {o.t[0], o.t[1], o.t[2]});
  for (const Tensor* t : o.t)
    if (!is_floating_point(t->dtype())) o.fail<DTypeError>("every operand must be floating");
  if (!amp::detail::autocast_active() &&
      (o.t[0]->dtype() != o.t[1]->dtype() || o.t[1]->dtype() != o.t[2]->dtype()))
    o.fail<DTypeError>("the operands' dtypes differ");
}

// input must broadcast to `out` (PyTorch's expand of input to the result).
void check_input_broadcasts(const Operands& o, const Shape& out) {
  const Tensor& input = *o.t[0];
  bool fits = input.ndim() <= out.ndim();
  for (int i = 1; fits && i <= input.ndim(); ++i)
    fits = input.size(-i) == 1 || input.size(-i) == out[out.ndim() - i];
  if (!fits) o.fail<ShapeError>("input does not broadcast to the result's shape " + to_string(out));
}

// The product's operands: `rank`-d each, inner dims (and batch, for 3-d) equal.
Shape check_product(const Operands& o, int rank) {
  const Tensor &a = *o.t[1], &b = *o.t[2];
  if (a.ndim() != rank || b.ndim() != rank)
    o.fail<ShapeError>(std::string(o.names[1]) + " and " + o.names[2] + " must be " + std::to_string(rank) + "-d");
  if (a.size(-1) != b.size(-2)) o.fail<ShapeError>("inner dimensions differ");
  if (rank == 3 && a.size(0) != b.size(0)) o.fail<ShapeError>("batch sizes differ");
  return rank == 3 ? Shape{a.size(0), a.size(1), b.size(2)} : Shape{a.size(0), b.size(1)};
}

// beta * input + alpha * product; input is skipped when beta is 0.
Tensor combine(const Tensor& input, const Tensor& product, const AddmmOptions& o) {
  const Tensor scaled = o.alpha == 1.0 ? product : mul(product, o.alpha);
  if (o.beta == 0.0) return scaled;
  return add(o.beta == 1.0 ? input : mul(input, o.beta), scaled);
}

}  // namespace

Tensor addmm(const Tensor& input_in, const Tensor& mat1_in, const Tensor& mat2_in, const AddmmOptions& options) {
  const Operands o{"addmm", {"input", "mat1", "mat2"}, {&input_in, &mat1_in, &mat2_in}};
  check_common(o);
  check_input_broadcasts(o, check_product(o, 2));
  Tensor input = input_in, mat1 = mat1_in, mat2 = mat2_in;
  amp::autocast_inputs(OpKind::addmm, {&input, &mat1, &mat2});
  const amp::detail::AutocastOff composed;
  return combine(input, matmul(mat1, mat2), options);
}

Tensor baddbmm(const Tensor& input_in, const Tensor& b1_in, const Tensor& b2_in, const AddmmOptions& options) {
  const Operands o{"baddbmm", {"input", "batch1", "batch2"}, {&input_in, &b1_in, &b2_in}};
  check_common(o);
  check_input_broadcasts(o, check_product(o, 3));
  Tensor input = input_in, b1 = b1_in, b2 = b2_in;
  amp::autocast_inputs(OpKind::baddbmm, {&input, &b1, &b2});
  const amp::detail::AutocastOff composed;
  return combine(input, matmul(b1, b2), options);
}

Tensor addbmm(const Tensor& input_in, const Tensor& b1_in, const Tensor& b2_in, const AddmmOptions& options) {
  const Operands o{"addbmm", {"input", "batch1", "batch2"}, {&input_in, &b1_in, &b2_in}};
  check_common(o);
  const Shape batched = check_product(o, 3);
  check_input_broadcasts(o, Shape{batched[1], batched[2]});
  Tensor input = input_in, b1 = b1_in, b2 = b2_in;
  amp::autocast_inputs(OpKind::addbmm, {&input, &b1, &b2});
  const amp::detail::AutocastOff composed;
  // sum_i b1[i]·b2[i] = [n, B*m]·[B*m, p]: one product, one float32 accumulation.
  const int64_t B = b1.size(0), n = b1.size(1), m = b1.size(2), p = b2.size(2);
  const Tensor lhs = reshape(permute(b1, {1, 0, 2}), Shape{n, B * m});
  return combine(input, matmul(lhs, reshape(b2, Shape{B * m, p})), options);
}

}  // namespace mixgrad::F
