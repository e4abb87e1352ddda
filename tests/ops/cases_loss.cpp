// Registry cases of the losses. Labels are int64 inputs built by `make` and
// not differentiated.
#include "op_registry.hpp"

namespace optest {

namespace {

InputSpec labels(mg::Shape shape, std::vector<int64_t> values) {
  return InputSpec(shape, [shape, values](mg::DType) { return mg::tensor<int64_t>(values, shape); });
}

// Labels of +-1 in the case's dtype (not differentiated).
InputSpec signs(mg::Shape shape, std::vector<double> values) {
  return InputSpec(shape, [shape, values](mg::DType dtype) { return mg::tensor(values, shape, dtype); });
}

}  // namespace

template <>
Cases cases_of<mg::OpKind::cross_entropy>() {
  using mg::Reduction;
  namespace F = mg::F;
  return {
      {.name = "cross_entropy_mean",
       .inputs = {{4, 5}, labels({4}, {0, 4, 2, 2})},
       .run = [](const Inputs& x) { return F::cross_entropy(x[0], x[1]); }},
      {.name = "cross_entropy_sum_label_smoothing",
       .inputs = {InputSpec({3, 6}, -3.0, 3.0), labels({3}, {5, 0, 3})},
       .run = [](const Inputs& x) {
         return F::cross_entropy(x[0], x[1], {.reduction = Reduction::sum, .label_smoothing = 0.2});
       }},
      {.name = "cross_entropy_spatial_none",
       .inputs = {{2, 3, 2, 2}, labels({2, 2, 2}, {0, 1, 2, 1, 2, 2, 0, 1})},
       .run = [](const Inputs& x) { return F::cross_entropy(x[0], x[1], {.reduction = Reduction::none}); }},
      {.name = "cross_entropy_class_axis_last",
       .inputs = {{2, 3, 4}, labels({2, 3}, {3, 0, 1, 2, 3, 3})},
       .run = [](const Inputs& x) {
         return F::cross_entropy(x[0], x[1], {.label_smoothing = 0.1, .axis = -1});
       }},
  };
}

template <>
Cases cases_of<mg::OpKind::nll_loss>() {
  using mg::Reduction;
  namespace F = mg::F;
  return {
      {.name = "nll_loss_mean",
       .inputs = {InputSpec({3, 4}, -3.0, -0.1), labels({3}, {1, 3, 0})},
       .run = [](const Inputs& x) { return F::nll_loss(x[0], x[1]); }},
      {.name = "nll_loss_spatial_none",
       .inputs = {InputSpec({2, 3, 2}, -3.0, -0.1), labels({2, 2}, {2, 0, 1, 1})},
       .run = [](const Inputs& x) { return F::nll_loss(x[0], x[1], {.reduction = Reduction::none}); }},
  };
}

template <>
Cases cases_of<mg::OpKind::mse_loss>() {
  using mg::Reduction;
  namespace F = mg::F;
  return {
      {.name = "mse_loss_mean",
       .inputs = {{3, 4}, {3, 4}},
       .run = [](const Inputs& x) { return F::mse_loss(x[0], x[1]); }},
      {.name = "mse_loss_none",
       .inputs = {{2, 3}, {2, 3}},
       .run = [](const Inputs& x) { return F::mse_loss(x[0], x[1], {.reduction = Reduction::none}); }},
  };
}

template <>
Cases cases_of<mg::OpKind::l1_loss>() {
  using mg::Reduction;
  namespace F = mg::F;
  return {
      {.name = "l1_loss_sum",
       .inputs = {{3, 4}, {3, 4}},
       .run = [](const Inputs& x) { return F::l1_loss(x[0], x[1], {.reduction = Reduction::sum}); }},
  };
}

template <>
Cases cases_of<mg::OpKind::binary_cross_entropy_with_logits>() {
  using mg::Reduction;
  namespace F = mg::F;
  return {
      {.name = "binary_cross_entropy_with_logits_mean",
       .inputs = {InputSpec({3, 4}, -4.0, 4.0), InputSpec({3, 4}, 0.0, 1.0)},
       .run = [](const Inputs& x) { return F::binary_cross_entropy_with_logits(x[0], x[1]); }},
      {.name = "binary_cross_entropy_with_logits_none",
       .inputs = {InputSpec({5}, -4.0, 4.0), InputSpec({5}, 0.0, 1.0)},
       .run = [](const Inputs& x) { return F::binary_cross_entropy_with_logits(x[0], x[1], {.reduction = Reduction::none}); }},
  };
}

// The losses composed of F:: ops (src/ops/loss_composed.cpp).

template <>
Cases cases_of<mg::OpKind::smooth_l1_loss>() {
  using mg::Reduction;
  namespace F = mg::F;
  const InputSpec wide({3, 4}, -2.0, 2.0);
  return {
      {.name = "smooth_l1_loss_mean",
       .inputs = {wide, wide},
       .run = [](const Inputs& x) { return F::smooth_l1_loss(x[0], x[1]); }},
      {.name = "smooth_l1_loss_beta_half_none",
       .inputs = {wide, wide},
       .run = [](const Inputs& x) { return F::smooth_l1_loss(x[0], x[1], {.reduction = Reduction::none, .beta = 0.5}); }},
      {.name = "smooth_l1_loss_beta_zero_is_l1",
       .inputs = {{5}, {5}},
       .run = [](const Inputs& x) { return F::smooth_l1_loss(x[0], x[1], {.reduction = Reduction::sum, .beta = 0.0}); }},
  };
}

template <>
Cases cases_of<mg::OpKind::huber_loss>() {
  using mg::Reduction;
  namespace F = mg::F;
  const InputSpec wide({3, 4}, -2.0, 2.0);
  return {
      {.name = "huber_loss_delta",
       .inputs = {wide, wide},
       .run = [](const Inputs& x) { return F::huber_loss(x[0], x[1], {.reduction = Reduction::sum, .delta = 0.7}); }},
  };
}

template <>
Cases cases_of<mg::OpKind::binary_cross_entropy>() {
  using mg::Reduction;
  namespace F = mg::F;
  const InputSpec probs({3, 4}, 0.05, 0.95), target({3, 4}, 0.0, 1.0);
  return {
      {.name = "binary_cross_entropy_mean",
       .inputs = {probs, target},
       .run = [](const Inputs& x) { return F::binary_cross_entropy(x[0], x[1]); }},
      {.name = "binary_cross_entropy_weight_none",
       .inputs = {probs, target, InputSpec({4}, 0.5, 2.0)},
       .run = [](const Inputs& x) {
         return F::binary_cross_entropy(x[0], x[1], {.reduction = Reduction::none, .weight = x[2]});
       }},
  };
}

template <>
Cases cases_of<mg::OpKind::poisson_nll_loss>() {
  using mg::Reduction;
  namespace F = mg::F;
  return {
      {.name = "poisson_nll_loss_log_input",
       .inputs = {{3, 4}, InputSpec({3, 4}, 0.0, 3.0)},
       .run = [](const Inputs& x) { return F::poisson_nll_loss(x[0], x[1]); }},
      {.name = "poisson_nll_loss_rate_full_none",
       .inputs = {InputSpec({3, 4}, 0.2, 3.0), InputSpec({3, 4}, 0.2, 4.0)},
       .run = [](const Inputs& x) {
         return F::poisson_nll_loss(x[0], x[1], {.reduction = Reduction::none, .log_input = false, .full = true});
       }},
  };
}

template <>
Cases cases_of<mg::OpKind::kl_div>() {
  using mg::Reduction;
  namespace F = mg::F;
  const InputSpec log_probs({3, 4}, -3.0, -0.1);
  return {
      {.name = "kl_div_batchmean",
       .inputs = {log_probs, InputSpec({3, 4}, 0.05, 1.0)},
       .run = [](const Inputs& x) { return F::kl_div(x[0], x[1], {.batchmean = true}); }},
      {.name = "kl_div_log_target_none",
       .inputs = {log_probs, log_probs},
       .run = [](const Inputs& x) { return F::kl_div(x[0], x[1], {.reduction = Reduction::none, .log_target = true}); }},
  };
}

template <>
Cases cases_of<mg::OpKind::soft_margin_loss>() {
  namespace F = mg::F;
  return {
      {.name = "soft_margin_loss",
       .inputs = {InputSpec({2, 3}, -3.0, 3.0), signs({2, 3}, {1, -1, -1, 1, 1, -1})},
       .run = [](const Inputs& x) { return F::soft_margin_loss(x[0], x[1]); }},
  };
}

template <>
Cases cases_of<mg::OpKind::margin_ranking_loss>() {
  using mg::Reduction;
  namespace F = mg::F;
  return {
      {.name = "margin_ranking_loss_margin",
       .inputs = {{6}, {6}, signs({6}, {1, -1, 1, 1, -1, -1})},
       .run = [](const Inputs& x) {
         return F::margin_ranking_loss(x[0], x[1], x[2], {.reduction = Reduction::none, .margin = 0.3});
       }},
  };
}

template <>
Cases cases_of<mg::OpKind::hinge_embedding_loss>() {
  namespace F = mg::F;
  return {
      {.name = "hinge_embedding_loss",
       .inputs = {InputSpec({2, 3}, 0.0, 2.0), signs({2, 3}, {1, -1, -1, 1, -1, 1})},
       .run = [](const Inputs& x) { return F::hinge_embedding_loss(x[0], x[1]); }},
  };
}

template <>
Cases cases_of<mg::OpKind::cosine_embedding_loss>() {
  using mg::Reduction;
  namespace F = mg::F;
  return {
      {.name = "cosine_embedding_loss_margin",
       .inputs = {{4, 5}, {4, 5}, signs({4}, {1, -1, -1, 1})},
       .run = [](const Inputs& x) { return F::cosine_embedding_loss(x[0], x[1], x[2], {.margin = -0.5}); }},
      {.name = "cosine_embedding_loss_one_pair",
       .inputs = {{5}, {5}, signs(mg::Shape{}, {1})},
       .run = [](const Inputs& x) {
         return F::cosine_embedding_loss(x[0], x[1], x[2], {.reduction = Reduction::sum});
       }},
  };
}

template <>
Cases cases_of<mg::OpKind::multi_margin_loss>() {
  using mg::Reduction;
  namespace F = mg::F;
  return {
      {.name = "multi_margin_loss",
       .inputs = {{3, 4}, labels({3}, {0, 3, 1})},
       .run = [](const Inputs& x) { return F::multi_margin_loss(x[0], x[1]); }},
      {.name = "multi_margin_loss_p2_weight_none",
       .inputs = {{3, 4}, labels({3}, {2, 2, 0}), InputSpec({4}, 0.5, 2.0)},
       .run = [](const Inputs& x) {
         return F::multi_margin_loss(x[0], x[1], {.reduction = Reduction::none, .p = 2, .margin = 0.5, .weight = x[2]});
       }},
      {.name = "multi_margin_loss_one_sample",
       .inputs = {{5}, labels(mg::Shape{}, {4})},
       .run = [](const Inputs& x) { return F::multi_margin_loss(x[0], x[1], {.reduction = Reduction::sum}); }},
  };
}

template <>
Cases cases_of<mg::OpKind::triplet_margin_loss>() {
  using mg::Reduction;
  namespace F = mg::F;
  return {
      {.name = "triplet_margin_loss",
       .inputs = {{3, 4}, {3, 4}, {3, 4}},
       .run = [](const Inputs& x) { return F::triplet_margin_loss(x[0], x[1], x[2], {.margin = 2.0}); }},
      {.name = "triplet_margin_loss_p1_swap_none",
       .inputs = {{3, 4}, {3, 4}, {3, 4}},
       .run = [](const Inputs& x) {
         return F::triplet_margin_loss(x[0], x[1], x[2], {.reduction = Reduction::none, .margin = 1.5, .p = 1.0, .swap = true});
       }},
  };
}

std::vector<OpCase> loss_cases() { return family_cases<mg::OpFamily::loss>(); }

}  // namespace optest
