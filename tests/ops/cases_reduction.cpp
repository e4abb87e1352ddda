// Registry cases of the reductions: reduce-all, last axis, leading axis,
// several axes ([N, C, H, W] -> [C]), keepdim, strided inputs, sum_to.
// Random inputs make ties of max / min / the inf-norm vanishingly unlikely.
#include <limits>
#include <vector>

#include "op_registry.hpp"

namespace optest {

template <>
Cases cases_of<mg::OpKind::sum>() {
  namespace F = mg::F;
  return {
      {.name = "sum_all", .inputs = {{3, 4}}, .run = [](const Inputs& x) { return F::sum(x[0]); }},
      {.name = "sum_last", .inputs = {{3, 5}}, .run = [](const Inputs& x) { return F::sum(x[0], -1); }},
      {.name = "sum_leading", .inputs = {{5, 3}}, .run = [](const Inputs& x) { return F::sum(x[0], 0); }},
      {.name = "sum_middle_keepdim",
       .inputs = {{2, 3, 4}},
       .run = [](const Inputs& x) { return F::sum(x[0], 1, true); }},
      {.name = "sum_nchw_to_c",
       .inputs = {{2, 3, 2, 2}},
       .run = [](const Inputs& x) { return F::sum(x[0], {0, 2, 3}); }},
      {.name = "sum_transposed",
       .inputs = {{4, 3}},
       .run = [](const Inputs& x) { return F::sum(F::transpose(x[0], 0, 1), 1); }},
      {.name = "sum_of_broadcast",
       .inputs = {{3}},
       .run = [](const Inputs& x) { return F::sum(F::broadcast_to(x[0], {2, 3}) * x[0], 0); }},
      // sum_to, the reduction of broadcast gradients, with sum's cases.
      {.name = "sum_to_row",
       .inputs = {{4, 3}},
       .run = [](const Inputs& x) { return F::sum_to(x[0], {3}); },
       .reads_autocast_entry = false},
      {.name = "sum_to",
       .inputs = {{2, 3, 4}},
       .run = [](const Inputs& x) { return F::sum_to(x[0], {3, 1}); },
       .reads_autocast_entry = false},
      {.name = "sum_to_scalar_like",
       .inputs = {{2, 3}},
       .run = [](const Inputs& x) { return F::sum_to(x[0], {1, 1}); },
       .reads_autocast_entry = false},
  };
}

template <>
Cases cases_of<mg::OpKind::mean>() {
  namespace F = mg::F;
  return {
      {.name = "mean_all", .inputs = {{3, 4}}, .run = [](const Inputs& x) { return F::mean(x[0]); }},
      {.name = "mean_axes_keepdim",
       .inputs = {{2, 3, 4}},
       .run = [](const Inputs& x) { return F::mean(x[0], {0, 2}, true); }},
  };
}

template <>
Cases cases_of<mg::OpKind::max>() {
  namespace F = mg::F;
  return {
      {.name = "max_all", .inputs = {{3, 4}}, .run = [](const Inputs& x) { return F::max(x[0]); }},
      {.name = "max_last", .inputs = {{3, 4}}, .run = [](const Inputs& x) { return F::max(x[0], 1); }},
      {.name = "max_axes_keepdim",
       .inputs = {{2, 3, 4}},
       .run = [](const Inputs& x) { return F::max(x[0], {0, 2}, true); }},
  };
}

template <>
Cases cases_of<mg::OpKind::min>() {
  namespace F = mg::F;
  return {
      {.name = "min_leading", .inputs = {{4, 3}}, .run = [](const Inputs& x) { return F::min(x[0], 0); }},
  };
}

template <>
Cases cases_of<mg::OpKind::argmax>() {
  namespace F = mg::F;
  return {
      {.name = "argmax_last",
       .inputs = {{3, 5}},
       .run = [](const Inputs& x) { return F::argmax(x[0], 1); },
       .check_low_precision = false,
       .check_gradient = false},
      {.name = "argmax_leading_keepdim",
       .inputs = {{4, 3}},
       .run = [](const Inputs& x) { return F::argmax(x[0], 0, true); },
       .check_low_precision = false,
       .check_gradient = false},
  };
}

template <>
Cases cases_of<mg::OpKind::var>() {
  namespace F = mg::F;
  return {
      {.name = "var_all", .inputs = {{3, 4}}, .run = [](const Inputs& x) { return F::var(x[0]); }},
      {.name = "var_last_unbiased",
       .inputs = {{3, 5}},
       .run = [](const Inputs& x) { return F::var(x[0], -1, false, 1); }},
      {.name = "var_nchw_keepdim",
       .inputs = {{2, 3, 2, 2}},
       .run = [](const Inputs& x) { return F::var(x[0], {0, 2, 3}, true); }},
  };
}

template <>
Cases cases_of<mg::OpKind::norm>() {
  namespace F = mg::F;
  return {
      {.name = "norm_all", .inputs = {{3, 4}}, .run = [](const Inputs& x) { return F::norm(x[0]); }},
      {.name = "norm_l1_last", .inputs = {{3, 4}}, .run = [](const Inputs& x) { return F::norm(x[0], 1.0, 1); }},
      {.name = "norm_p3_leading_keepdim",
       .inputs = {{4, 3}},
       .run = [](const Inputs& x) { return F::norm(x[0], 3.0, 0, true); }},
      {.name = "norm_inf_last",
       .inputs = {{3, 4}},
       .run = [](const Inputs& x) { return F::norm(x[0], std::numeric_limits<double>::infinity(), 1); }},
  };
}

template <>
Cases cases_of<mg::OpKind::prod>() {
  namespace F = mg::F;
  // Rows with no, one and two zeros: the gradient at a lone zero is the
  // product of the others, and with two zeros every gradient is 0.
  const mg::Shape zs{3, 4};
  const std::vector<double> zv{0.5, 0.0, -0.7, 0.9, 0.0, 0.3, 0.0, -0.8, 0.6, -0.4, 0.9, 0.7};
  return {
      {.name = "prod_last", .inputs = {{3, 4}}, .run = [](const Inputs& x) { return F::prod(x[0], 1); }},
      {.name = "prod_middle_keepdim",
       .inputs = {InputSpec({2, 3, 4}, 0.5, 1.5)},
       .run = [](const Inputs& x) { return F::prod(x[0], 1, true); }},
      {.name = "prod_with_zeros",
       .inputs = {InputSpec(zs, [zs, zv](mg::DType dt) { return mg::tensor(zv, zs, dt); }, true)},
       .run = [](const Inputs& x) { return F::prod(x[0], -1); }},
  };
}

std::vector<OpCase> reduction_cases() { return family_cases<mg::OpFamily::reduction>(); }

}  // namespace optest
