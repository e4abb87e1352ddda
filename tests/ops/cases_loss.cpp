// Registry cases of the losses. Labels are int64 inputs built by `make` and
// not differentiated.
#include "op_registry.hpp"

namespace optest {

namespace {

InputSpec labels(mg::Shape shape, std::vector<int64_t> values) {
  return InputSpec(shape, [shape, values](mg::DType) { return mg::tensor<int64_t>(values, shape); });
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

std::vector<OpCase> loss_cases() { return family_cases<mg::OpFamily::loss>(); }

}  // namespace optest
