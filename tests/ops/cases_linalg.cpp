// Registered cases of F::matmul and F::linear: every shape rule (2-d,
// batched, broadcast batch dims, 1-d operands, transposed views) and linear
// with and without bias, on a leading batch dim too.
#include "op_registry.hpp"

namespace optest {

template <>
Cases cases_of<mg::OpKind::matmul>() {
  using mg::F::linear;
  using mg::F::matmul;
  using mg::F::transpose;
  return {
      {.name = "matmul_2d", .inputs = {{3, 4}, {4, 5}}, .run = [](const Inputs& x) { return matmul(x[0], x[1]); }},
      {.name = "matmul_vec_vec", .inputs = {{5}, {5}}, .run = [](const Inputs& x) { return matmul(x[0], x[1]); }},
      {.name = "matmul_transposed_views",
       .inputs = {{4, 3}, {5, 4}},
       .run = [](const Inputs& x) { return matmul(transpose(x[0], 0, 1), transpose(x[1], 0, 1)); }},
      // k = 64: a longer reduction in low precision than the others.
      {.name = "matmul_long_k",
       .inputs = {{3, 64}, {64, 2}},
       .run = [](const Inputs& x) { return matmul(x[0], x[1]); },
       .lowp_tolerance = 2.0},
  };
}

template <>
Cases cases_of<mg::OpKind::batched_matmul>() {
  using mg::F::linear;
  using mg::F::matmul;
  using mg::F::transpose;
  return {
      {.name = "matmul_batched",
       .inputs = {{2, 3, 4}, {2, 4, 2}},
       .run = [](const Inputs& x) { return matmul(x[0], x[1]); }},
      {.name = "matmul_batch_broadcast",
       .inputs = {{2, 1, 3, 4}, {3, 4, 2}},
       .run = [](const Inputs& x) { return matmul(x[0], x[1]); }},
      {.name = "matmul_batched_times_2d",
       .inputs = {{2, 3, 4}, {4, 5}},
       .run = [](const Inputs& x) { return matmul(x[0], x[1]); }},
      {.name = "matmul_2d_times_batched",
       .inputs = {{3, 4}, {2, 4, 5}},
       .run = [](const Inputs& x) { return matmul(x[0], x[1]); }},
      {.name = "matmul_vec_mat", .inputs = {{4}, {2, 4, 3}}, .run = [](const Inputs& x) { return matmul(x[0], x[1]); }},
      {.name = "matmul_mat_vec", .inputs = {{2, 3, 4}, {4}}, .run = [](const Inputs& x) { return matmul(x[0], x[1]); }},
      {.name = "matmul_broadcast_view_operand",
       .inputs = {{1, 3, 4}, {2, 4, 2}},
       .run =
           [](const Inputs& x) {
             return matmul(mg::F::broadcast_to(x[0], {2, 3, 4}), x[1]);
           }},
      {.name = "matmul_permuted_batch",
       .inputs = {{3, 2, 4}, {2, 4, 3}},
       .run =
           [](const Inputs& x) {
             return matmul(mg::F::permute(x[0], {1, 0, 2}), x[1]);
           }},
  };
}

template <>
Cases cases_of<mg::OpKind::linear>() {
  using mg::F::linear;
  using mg::F::matmul;
  using mg::F::transpose;
  return {
      {.name = "linear",
       .inputs = {{3, 4}, {5, 4}, {5}},
       .run = [](const Inputs& x) { return linear(x[0], x[1], x[2]); }},
      {.name = "linear_no_bias", .inputs = {{3, 4}, {2, 4}}, .run = [](const Inputs& x) { return linear(x[0], x[1]); }},
      {.name = "linear_batched_input",
       .inputs = {{2, 3, 4}, {5, 4}, {5}},
       .run = [](const Inputs& x) { return linear(x[0], x[1], x[2]); }},
      {.name = "linear_vector_input",
       .inputs = {{4}, {3, 4}, {3}},
       .run = [](const Inputs& x) { return linear(x[0], x[1], x[2]); }},
      {.name = "linear_transposed_input",
       .inputs = {{4, 3}, {2, 4}, {2}},
       .run = [](const Inputs& x) { return linear(transpose(x[0], 0, 1), x[1], x[2]); }},
  };
}

namespace {
InputSpec ignored(mg::Shape shape) {
  InputSpec s(shape);
  s.differentiable = false;
  return s;
}
}  // namespace

template <>
Cases cases_of<mg::OpKind::addmm>() {
  namespace F = mg::F;
  return {
      {.name = "addmm", .inputs = {{3, 5}, {3, 4}, {4, 5}}, .run = [](const Inputs& x) { return F::addmm(x[0], x[1], x[2]); }},
      {.name = "addmm_broadcast_input_beta_alpha",
       .inputs = {{5}, {3, 4}, {4, 5}},
       .run = [](const Inputs& x) { return F::addmm(x[0], x[1], x[2], {.beta = 0.5, .alpha = -2.0}); }},
      // beta 0: input is not read (no gradient reaches it), as in PyTorch.
      {.name = "addmm_beta_zero",
       .inputs = {ignored({3, 1}), {3, 4}, {4, 2}},
       .run = [](const Inputs& x) { return F::addmm(x[0], x[1], x[2], {.beta = 0.0, .alpha = 1.5}); }},
  };
}

template <>
Cases cases_of<mg::OpKind::baddbmm>() {
  namespace F = mg::F;
  return {
      {.name = "baddbmm",
       .inputs = {{2, 3, 5}, {2, 3, 4}, {2, 4, 5}},
       .run = [](const Inputs& x) { return F::baddbmm(x[0], x[1], x[2]); }},
      {.name = "baddbmm_broadcast_input_beta_alpha",
       .inputs = {{3, 1}, {2, 3, 4}, {2, 4, 2}},
       .run = [](const Inputs& x) { return F::baddbmm(x[0], x[1], x[2], {.beta = 2.0, .alpha = 0.25}); }},
  };
}

template <>
Cases cases_of<mg::OpKind::addbmm>() {
  namespace F = mg::F;
  return {
      {.name = "addbmm",
       .inputs = {{3, 5}, {2, 3, 4}, {2, 4, 5}},
       .run = [](const Inputs& x) { return F::addbmm(x[0], x[1], x[2]); }},
      {.name = "addbmm_broadcast_input_beta_alpha",
       .inputs = {{2}, {3, 3, 4}, {3, 4, 2}},
       .run = [](const Inputs& x) { return F::addbmm(x[0], x[1], x[2], {.beta = -1.0, .alpha = 0.5}); }},
  };
}

// einsum, cdist and addmm_activation: cases_einsum_cdist.cpp.
template <>
Cases cases_of<mg::OpKind::einsum>();
template <>
Cases cases_of<mg::OpKind::cdist>();
template <>
Cases cases_of<mg::OpKind::addmm_activation>();

std::vector<OpCase> linalg_cases() { return family_cases<mg::OpFamily::linalg>(); }

}  // namespace optest
