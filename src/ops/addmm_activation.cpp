// F::addmm_activation (PyTorch's _addmm_activation): relu or gelu of addmm,
// composed of F::addmm and F::relu / F::gelu, so differentiable twice on
// every device. A fused kernel would apply the activation in the product's
// epilogue; left for later. Autocast applies this op's entry (low precision
// on the CPU, as PyTorch's CPU list; the inputs' dtype on CUDA, which
// PyTorch's CUDA list leaves it to) and the parts run with autocast off.
#include "mixgrad/ops/addmm_activation.hpp"

#include <string>

#include "mixgrad/error.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

constexpr const char* kOp = "addmm_activation";

template <class E>
[[noreturn]] void fail(const std::string& why, const Tensor& input, const Tensor& mat1, const Tensor& mat2) {
  throw E(std::string(kOp) + ": " + why + " (input " + ops::describe(input) + ", mat1 " + ops::describe(mat1) +
          ", mat2 " + ops::describe(mat2) + ")");
}

// addmm's checks, naming this op.
void check(const Tensor& input, const Tensor& mat1, const Tensor& mat2) {
  ops::check_defined(kOp, {&input, &mat1, &mat2});
  ops::check_same_device(kOp, {&input, &mat1, &mat2});
  for (const Tensor* t : {&input, &mat1, &mat2})
    if (!is_floating_point(t->dtype())) fail<DTypeError>("every operand must be floating", input, mat1, mat2);
  if (!amp::detail::autocast_active() && (input.dtype() != mat1.dtype() || mat1.dtype() != mat2.dtype()))
    fail<DTypeError>("the operands' dtypes differ", input, mat1, mat2);
  if (mat1.ndim() != 2 || mat2.ndim() != 2) fail<ShapeError>("mat1 and mat2 must be 2-d", input, mat1, mat2);
  if (mat1.size(1) != mat2.size(0)) fail<ShapeError>("inner dimensions differ", input, mat1, mat2);
  const int64_t out[2] = {mat1.size(0), mat2.size(1)};
  bool fits = input.ndim() <= 2;
  for (int i = 1; fits && i <= input.ndim(); ++i) fits = input.size(-i) == 1 || input.size(-i) == out[2 - i];
  if (!fits) fail<ShapeError>("input does not broadcast to the product's shape", input, mat1, mat2);
}

}  // namespace

Tensor addmm_activation(const Tensor& input_in, const Tensor& mat1_in, const Tensor& mat2_in,
                        const AddmmOptions& options, bool use_gelu) {
  check(input_in, mat1_in, mat2_in);
  Tensor input = input_in, mat1 = mat1_in, mat2 = mat2_in;
  amp::autocast_inputs(OpKind::addmm_activation, {&input, &mat1, &mat2});
  const amp::detail::AutocastOff composed;
  const Tensor y = addmm(input, mat1, mat2, options);
  return use_gelu ? gelu(y) : relu(y);
}

}  // namespace mixgrad::F
