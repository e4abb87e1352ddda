// Registry cases of the elementwise ops: binary (with broadcasting and
// scalars), comparisons, where and the unary ops. Inputs stay tiny: the
// gradient check runs the op twice per input element. Ranges keep log, sqrt,
// rsqrt, log1p, div, pow and tan away from their singularities (tan's within
// +-1.2 of 0, clear of pi/2); random inputs make ties at the kinks (relu,
// abs, maximum, clamp, hardswish at +-3) vanishingly unlikely.
#include "op_registry.hpp"

namespace optest {

namespace {

namespace F = mg::F;

// Small integer-valued floats, so comparisons see ties.
InputSpec integral(mg::Shape shape, std::vector<double> values) {
  return InputSpec(shape, [shape, values](mg::DType dtype) { return mg::tensor(values, shape, dtype); });
}

InputSpec mask(mg::Shape shape, std::vector<bool> values) {
  return InputSpec(shape, [shape, values](mg::DType) { return mg::tensor<bool>(values, shape); });
}

OpCase comparison(std::string name, mg::Tensor (*op)(const mg::Tensor&, const mg::Tensor&)) {
  return {.name = std::move(name),
          .inputs = {integral({2, 3}, {0, 1, 2, 2, 1, 0}), integral({3}, {1, 1, 0})},
          .run = [op](const Inputs& x) { return op(x[0], x[1]); },
          .check_gradient = false};
}

}  // namespace

template <>
Cases cases_of<mg::OpKind::add>() {
  return {
      {.name = "add", .inputs = {{3, 4}, {3, 4}}, .run = [](const Inputs& x) { return F::add(x[0], x[1]); }},
      {.name = "add_broadcast_row", .inputs = {{3, 4}, {4}}, .run = [](const Inputs& x) { return F::add(x[0], x[1]); }},
      {.name = "add_broadcast_both",
       .inputs = {{3, 1}, {1, 4}},
       .run = [](const Inputs& x) { return F::add(x[0], x[1]); }},
      {.name = "add_0d", .inputs = {{2, 3}, mg::Shape{}}, .run = [](const Inputs& x) { return x[0] + x[1]; }},
      {.name = "add_scalar", .inputs = {{2, 3}}, .run = [](const Inputs& x) { return F::add(x[0], 2.5); }},
  };
}

template <>
Cases cases_of<mg::OpKind::sub>() {
  return {
      {.name = "sub_broadcast",
       .inputs = {{2, 3, 4}, {3, 1}},
       .run = [](const Inputs& x) { return F::sub(x[0], x[1]); }},
      {.name = "sub_broadcast_lhs", .inputs = {{4}, {3, 4}}, .run = [](const Inputs& x) { return x[0] - x[1]; }},
      {.name = "sub_scalar", .inputs = {{2, 3}}, .run = [](const Inputs& x) { return x[0] - 1.0; }},
      {.name = "scalar_sub", .inputs = {{2, 3}}, .run = [](const Inputs& x) { return 1.0 - x[0]; }},
  };
}

template <>
Cases cases_of<mg::OpKind::mul>() {
  return {
      {.name = "mul", .inputs = {{3, 4}, {3, 4}}, .run = [](const Inputs& x) { return x[0] * x[1]; }},
      {.name = "mul_broadcast",
       .inputs = {{2, 3, 2}, {3, 1}},
       .run = [](const Inputs& x) { return F::mul(x[0], x[1]); }},
      {.name = "mul_transposed",
       .inputs = {{4, 3}, {3, 4}},
       .run = [](const Inputs& x) { return F::mul(F::transpose(x[0], 0, 1), x[1]); }},
      {.name = "mul_scalar", .inputs = {{2, 3}}, .run = [](const Inputs& x) { return 3.0 * x[0]; }},
      {.name = "operators",
       .inputs = {{2, 3}, {3}},
       .run = [](const Inputs& x) { return -(2.0 * x[0] - x[1] / 3.0 + 1.0) * x[1]; }},
  };
}

template <>
Cases cases_of<mg::OpKind::div>() {
  const InputSpec positive({3, 4}, 0.5, 2.0);
  return {
      {.name = "div", .inputs = {{3, 4}, positive}, .run = [](const Inputs& x) { return x[0] / x[1]; }},
      {.name = "div_broadcast",
       .inputs = {{2, 3}, InputSpec({3}, 0.5, 2.0)},
       .run = [](const Inputs& x) { return F::div(x[0], x[1]); }},
      {.name = "div_scalar", .inputs = {{2, 3}}, .run = [](const Inputs& x) { return x[0] / 4.0; }},
      {.name = "scalar_div",
       .inputs = {InputSpec({2, 3}, 0.5, 2.0)},
       .run = [](const Inputs& x) { return 2.0 / x[0]; }},
  };
}

template <>
Cases cases_of<mg::OpKind::pow>() {
  const InputSpec positive({3, 4}, 0.5, 2.0);
  return {
      {.name = "pow",
       .inputs = {positive, InputSpec({3, 4}, -1.0, 2.0)},
       .run = [](const Inputs& x) { return F::pow(x[0], x[1]); }},
      {.name = "pow_broadcast",
       .inputs = {InputSpec({2, 3}, 0.5, 2.0), InputSpec({3}, -1.0, 2.0)},
       .run = [](const Inputs& x) { return F::pow(x[0], x[1]); }},
      {.name = "pow_scalar", .inputs = {{2, 3}}, .run = [](const Inputs& x) { return F::pow(x[0], 3.0); }},
      {.name = "pow_square", .inputs = {{2, 3}}, .run = [](const Inputs& x) { return F::pow(x[0], 2.0); }},
      {.name = "pow_scalar_fractional",
       .inputs = {InputSpec({2, 3}, 0.5, 2.0)},
       .run = [](const Inputs& x) { return F::pow(x[0], 2.5); }},
  };
}

template <>
Cases cases_of<mg::OpKind::maximum>() {
  return {
      {.name = "maximum", .inputs = {{3, 4}, {3, 4}}, .run = [](const Inputs& x) { return F::maximum(x[0], x[1]); }},
      {.name = "maximum_broadcast",
       .inputs = {{3, 4}, {4}},
       .run = [](const Inputs& x) { return F::maximum(x[0], x[1]); }},
      {.name = "maximum_scalar", .inputs = {{3, 4}}, .run = [](const Inputs& x) { return F::maximum(x[0], 0.2); }},
  };
}

template <>
Cases cases_of<mg::OpKind::minimum>() {
  return {
      {.name = "minimum", .inputs = {{2, 3}, {2, 1}}, .run = [](const Inputs& x) { return F::minimum(x[0], x[1]); }},
      {.name = "minimum_scalar", .inputs = {{3, 4}}, .run = [](const Inputs& x) { return F::minimum(x[0], -0.1); }},
  };
}

template <>
Cases cases_of<mg::OpKind::where>() {
  return {
      {.name = "where",
       .inputs = {mask({2, 3}, {true, false, true, false, false, true}), {2, 3}, {2, 3}},
       .run = [](const Inputs& x) { return F::where(x[0], x[1], x[2]); }},
      {.name = "where_broadcast",
       .inputs = {mask({3, 1}, {true, false, true}), {3, 4}, {4}},
       .run = [](const Inputs& x) { return F::where(x[0], x[1], x[2]); }},
  };
}

template <>
Cases cases_of<mg::OpKind::compare>() {
  return {
      comparison("eq", &F::eq),
      comparison("ne", &F::ne),
      comparison("lt", &F::lt),
      comparison("le", &F::le),
      comparison("gt", &F::gt),
      comparison("ge", &F::ge),
      {.name = "gt_scalar",
       .inputs = {integral({2, 3}, {0, 1, 2, 2, 1, 0})},
       .run = [](const Inputs& x) { return x[0] > 1.0; },
       .check_gradient = false},
  };
}

template <>
Cases cases_of<mg::OpKind::neg>() {
  return {
      {.name = "neg", .inputs = {{2, 3}}, .run = [](const Inputs& x) { return -x[0]; }},
  };
}

template <>
Cases cases_of<mg::OpKind::exp>() {
  return {
      {.name = "exp", .inputs = {{3, 4}}, .run = [](const Inputs& x) { return F::exp(x[0]); }},
  };
}

template <>
Cases cases_of<mg::OpKind::log>() {
  return {
      {.name = "log", .inputs = {InputSpec({3, 4}, 0.1, 2.0)}, .run = [](const Inputs& x) { return F::log(x[0]); }},
  };
}

template <>
Cases cases_of<mg::OpKind::sqrt>() {
  return {
      {.name = "sqrt", .inputs = {InputSpec({3, 4}, 0.1, 2.0)}, .run = [](const Inputs& x) { return F::sqrt(x[0]); }},
  };
}

template <>
Cases cases_of<mg::OpKind::rsqrt>() {
  return {
      {.name = "rsqrt",
       .inputs = {InputSpec({3, 4}, 0.2, 2.0)},
       .run = [](const Inputs& x) { return F::rsqrt(x[0]); }},
  };
}

template <>
Cases cases_of<mg::OpKind::abs>() {
  return {
      {.name = "abs", .inputs = {{3, 4}}, .run = [](const Inputs& x) { return F::abs(x[0]); }},
  };
}

template <>
Cases cases_of<mg::OpKind::clamp>() {
  return {
      {.name = "clamp",
       .inputs = {InputSpec({3, 4}, -2.0, 2.0)},
       .run = [](const Inputs& x) { return F::clamp(x[0], -0.5, 0.75); }},
  };
}

template <>
Cases cases_of<mg::OpKind::relu>() {
  return {
      {.name = "relu", .inputs = {{3, 4}}, .run = [](const Inputs& x) { return F::relu(x[0]); }},
      {.name = "relu_transposed",
       .inputs = {{4, 3}},
       .run = [](const Inputs& x) { return F::relu(F::transpose(x[0], 0, 1)); }},
  };
}

template <>
Cases cases_of<mg::OpKind::leaky_relu>() {
  return {
      {.name = "leaky_relu", .inputs = {{3, 4}}, .run = [](const Inputs& x) { return F::leaky_relu(x[0], 0.1); }},
  };
}

template <>
Cases cases_of<mg::OpKind::gelu>() {
  return {
      {.name = "gelu", .inputs = {InputSpec({3, 4}, -3.0, 3.0)}, .run = [](const Inputs& x) { return F::gelu(x[0]); }},
      {.name = "gelu_tanh",
       .inputs = {InputSpec({3, 4}, -4.0, 4.0)},
       .run = [](const Inputs& x) { return F::gelu(x[0], F::GeluApproximation::tanh); }},
  };
}

template <>
Cases cases_of<mg::OpKind::sigmoid>() {
  return {
      {.name = "sigmoid",
       .inputs = {InputSpec({3, 4}, -4.0, 4.0)},
       .run = [](const Inputs& x) { return F::sigmoid(x[0]); }},
  };
}

template <>
Cases cases_of<mg::OpKind::tanh>() {
  return {
      {.name = "tanh", .inputs = {InputSpec({3, 4}, -2.0, 2.0)}, .run = [](const Inputs& x) { return F::tanh(x[0]); }},
      {.name = "tanh_of_product",
       .inputs = {{2, 3}, {3}},
       .run = [](const Inputs& x) { return F::tanh(x[0] * x[1]); }},
  };
}

template <>
Cases cases_of<mg::OpKind::silu>() {
  return {
      {.name = "silu", .inputs = {InputSpec({3, 4}, -4.0, 4.0)}, .run = [](const Inputs& x) { return F::silu(x[0]); }},
  };
}

template <>
Cases cases_of<mg::OpKind::sin>() {
  return {
      {.name = "sin", .inputs = {InputSpec({3, 4}, -4.0, 4.0)}, .run = [](const Inputs& x) { return F::sin(x[0]); }},
  };
}

template <>
Cases cases_of<mg::OpKind::cos>() {
  return {
      {.name = "cos", .inputs = {InputSpec({3, 4}, -4.0, 4.0)}, .run = [](const Inputs& x) { return F::cos(x[0]); }},
  };
}

template <>
Cases cases_of<mg::OpKind::tan>() {
  return {
      {.name = "tan", .inputs = {InputSpec({3, 4}, -1.2, 1.2)}, .run = [](const Inputs& x) { return F::tan(x[0]); }},
  };
}

template <>
Cases cases_of<mg::OpKind::log1p>() {
  return {
      {.name = "log1p",
       .inputs = {InputSpec({3, 4}, -0.5, 2.0)},
       .run = [](const Inputs& x) { return F::log1p(x[0]); }},
  };
}

template <>
Cases cases_of<mg::OpKind::expm1>() {
  return {
      {.name = "expm1", .inputs = {InputSpec({3, 4}, -2.0, 2.0)}, .run = [](const Inputs& x) { return F::expm1(x[0]); }},
  };
}

template <>
Cases cases_of<mg::OpKind::erf>() {
  return {
      {.name = "erf", .inputs = {InputSpec({3, 4}, -2.5, 2.5)}, .run = [](const Inputs& x) { return F::erf(x[0]); }},
  };
}

template <>
Cases cases_of<mg::OpKind::softplus>() {
  return {
      {.name = "softplus", .inputs = {InputSpec({3, 4}, -4.0, 4.0)}, .run = [](const Inputs& x) { return F::softplus(x[0]); }},
      // beta 2, threshold 3: inputs above 1.5 take the linear branch
      {.name = "softplus_beta_threshold",
       .inputs = {InputSpec({3, 4}, -3.0, 3.0)},
       .run = [](const Inputs& x) { return F::softplus(x[0], 2.0, 3.0); }},
  };
}

template <>
Cases cases_of<mg::OpKind::hardswish>() {
  return {
      {.name = "hardswish",
       .inputs = {InputSpec({4, 5}, -5.0, 5.0)},
       .run = [](const Inputs& x) { return F::hardswish(x[0]); }},
  };
}

template <>
Cases cases_of<mg::OpKind::mish>() {
  return {
      {.name = "mish", .inputs = {InputSpec({3, 4}, -4.0, 4.0)}, .run = [](const Inputs& x) { return F::mish(x[0]); }},
      {.name = "mish_transposed",
       .inputs = {{4, 3}},
       .run = [](const Inputs& x) { return F::mish(F::transpose(x[0], 0, 1)); }},
  };
}

template <>
Cases cases_of<mg::OpKind::hardtanh>() {
  return {
      {.name = "hardtanh", .inputs = {InputSpec({3, 4}, -2.0, 2.0)}, .run = [](const Inputs& x) { return F::hardtanh(x[0]); }},
      {.name = "hardtanh_bounds",
       .inputs = {InputSpec({3, 4}, -1.0, 1.5)},
       .run = [](const Inputs& x) { return F::hardtanh(x[0], -0.25, 0.5); }},
      {.name = "hardtanh_transposed",
       .inputs = {InputSpec({4, 3}, -2.0, 2.0)},
       .run = [](const Inputs& x) { return F::hardtanh(F::transpose(x[0], 0, 1)); }},
  };
}

std::vector<OpCase> elementwise_cases() { return family_cases<mg::OpFamily::elementwise>(); }

}  // namespace optest
