// Registry cases of einsum, cdist and addmm_activation (composed of F::
// ops): einsum's explicit and implicit outputs, "...", diagonals and three
// operands; cdist's p = 2 both ways and the other norms; addmm_activation
// with relu and gelu.
#include <limits>

#include "op_registry.hpp"

namespace optest {

template <>
Cases cases_of<mg::OpKind::einsum>() {
  namespace F = mg::F;
  return {
      {.name = "einsum_batched_matmul",
       .inputs = {{2, 3, 4}, {2, 4, 5}},
       .run = [](const Inputs& x) { return F::einsum("bij,bjk->bik", {x[0], x[1]}); }},
      {.name = "einsum_attention_scores",
       .inputs = {{2, 3, 2, 4}, {2, 5, 2, 4}},
       .run = [](const Inputs& x) { return F::einsum("bqhd,bkhd->bhqk", {x[0], x[1]}); }},
      {.name = "einsum_ellipsis_broadcast",
       .inputs = {{2, 3, 4}, {4, 2}},
       .run = [](const Inputs& x) { return F::einsum("...ij,...jk->...ik", {x[0], x[1]}); }},
      {.name = "einsum_implicit_outer",
       .inputs = {{3}, {4}},
       .run = [](const Inputs& x) { return F::einsum("i,j", {x[0], x[1]}); }},
      {.name = "einsum_diagonal_and_trace",
       .inputs = {{3, 2, 3}},
       .run = [](const Inputs& x) { return F::einsum("iji->j", {x[0]}); }},
      {.name = "einsum_three_operands",
       .inputs = {{3, 3}, {3, 4}, {4}},
       .run = [](const Inputs& x) { return F::einsum("ij,jk,k->i", {x[0], x[1], x[2]}); }},
  };
}

template <>
Cases cases_of<mg::OpKind::cdist>() {
  namespace F = mg::F;
  using M = F::CdistMode;
  auto with = [](double p, M mode = M::donot_use_mm_for_euclid_dist) {
    return [p, mode](const Inputs& x) { return F::cdist(x[0], x[1], p, mode); };
  };
  return {
      {.name = "cdist_p2_matmul", .inputs = {{3, 4}, {5, 4}}, .run = with(2.0, M::use_mm_for_euclid_dist),
       .lowp_tolerance = 4.0},
      {.name = "cdist_p2_batched_differences", .inputs = {{2, 3, 4}, {1, 5, 4}}, .run = with(2.0)},
      {.name = "cdist_p1", .inputs = {{3, 4}, {2, 4}}, .run = with(1.0)},
      {.name = "cdist_p3", .inputs = {{3, 4}, {2, 4}}, .run = with(3.0)},
      {.name = "cdist_p_half", .inputs = {{3, 2}, {2, 2}}, .run = with(0.5), .lowp_tolerance = 2.0},
      {.name = "cdist_p_inf", .inputs = {{3, 4}, {2, 4}}, .run = with(std::numeric_limits<double>::infinity())},
  };
}

template <>
Cases cases_of<mg::OpKind::addmm_activation>() {
  namespace F = mg::F;
  return {
      {.name = "addmm_activation_relu",
       .inputs = {{5}, {3, 4}, {4, 5}},
       .run = [](const Inputs& x) { return F::addmm_activation(x[0], x[1], x[2], {.beta = 0.5, .alpha = 2.0}); }},
      {.name = "addmm_activation_gelu",
       .inputs = {{3, 5}, {3, 4}, {4, 5}},
       .run = [](const Inputs& x) { return F::addmm_activation(x[0], x[1], x[2], {}, true); }},
  };
}

}  // namespace optest
