// Registry cases of the indexing ops. Index tensors are int64 inputs built
// by `make` and not differentiated; the cases repeat indices so that the
// scatter-add backward has to accumulate.
#include "op_registry.hpp"

namespace optest {

namespace {

InputSpec ids(mg::Shape shape, std::vector<int64_t> values) {
  return InputSpec(shape, [shape, values](mg::DType) { return mg::tensor<int64_t>(values, shape); });
}

}  // namespace

template <>
Cases cases_of<mg::OpKind::embedding>() {
  namespace F = mg::F;
  return {
      {.name = "embedding_2d_ids_repeated",
       .inputs = {{5, 3}, ids({2, 3}, {0, 4, 2, 2, 1, 4})},
       .run = [](const Inputs& x) { return F::embedding(x[0], x[1]); }},
      {.name = "embedding_1d_ids",
       .inputs = {{4, 6}, ids({5}, {3, 3, 3, 0, 1})},
       .run = [](const Inputs& x) { return F::embedding(x[0], x[1]); }},
  };
}

template <>
Cases cases_of<mg::OpKind::index_select>() {
  namespace F = mg::F;
  return {
      {.name = "index_select_middle_dim",
       .inputs = {{4, 3, 2}, ids({4}, {2, 0, 2, 1})},
       .run = [](const Inputs& x) { return F::index_select(x[0], 1, x[1]); }},
      {.name = "index_select_rows",
       .inputs = {{5, 3}, ids({3}, {4, 4, 0})},
       .run = [](const Inputs& x) { return F::index_select(x[0], 0, x[1]); }},
      {.name = "index_select_last_dim_negative",
       .inputs = {{2, 5}, ids({6}, {1, 3, 3, 0, 4, 1})},
       .run = [](const Inputs& x) { return F::index_select(x[0], -1, x[1]); }},
  };
}

template <>
Cases cases_of<mg::OpKind::gather>() {
  namespace F = mg::F;
  return {
      {.name = "gather_last_dim",
       .inputs = {{3, 4}, ids({3, 2}, {0, 3, 3, 1, 2, 2})},
       .run = [](const Inputs& x) { return F::gather(x[0], 1, x[1]); }},
      {.name = "gather_first_dim_smaller_index",
       .inputs = {{4, 3, 2}, ids({2, 2, 2}, {3, 0, 1, 1, 0, 0, 2, 3})},
       .run = [](const Inputs& x) { return F::gather(x[0], 0, x[1]); }},
      {.name = "gather_transposed_input",
       .inputs = {{4, 3}, ids({2, 4}, {0, 1, 2, 0, 2, 2, 1, 0})},
       .run = [](const Inputs& x) { return F::gather(F::transpose(x[0], 0, 1), 1, x[1]); }},
  };
}

template <>
Cases cases_of<mg::OpKind::scatter_add>() {
  namespace F = mg::F;
  return {
      {.name = "scatter_add_last_dim",
       .inputs = {{3, 4}, ids({3, 2}, {0, 3, 3, 3, 2, 1}), {3, 2}},
       .run = [](const Inputs& x) { return F::scatter_add(x[0], 1, x[1], x[2]); }},
      {.name = "scatter_add_first_dim_larger_src",
       .inputs = {{4, 3}, ids({2, 3}, {1, 0, 3, 1, 2, 3}), {3, 3}},
       .run = [](const Inputs& x) { return F::scatter_add(x[0], 0, x[1], x[2]); }},
  };
}

template <>
Cases cases_of<mg::OpKind::index_put>() {
  namespace F = mg::F;
  return {
      {.name = "index_put_rows",
       .inputs = {{5, 3}, ids({3}, {4, 0, 2}), {3, 3}},
       .run = [](const Inputs& x) { return F::index_put(x[0], {x[1]}, x[2]); }},
      {.name = "index_put_rows_broadcast_values_negative_index",
       .inputs = {{5, 3}, ids({2}, {-1, 1}), {3}},
       .run = [](const Inputs& x) { return F::index_put(x[0], {x[1]}, x[2]); }},
      {.name = "index_put_two_indices_broadcast",
       .inputs = {{4, 3, 2}, ids({2, 1}, {3, 0}), ids({1, 2}, {2, 1}), {2, 2, 2}},
       .run = [](const Inputs& x) { return F::index_put(x[0], {x[1], x[2]}, x[3]); }},
      {.name = "index_put_accumulate_repeated",
       .inputs = {{4, 3}, ids({4}, {1, 3, 1, 1}), {4, 1}},
       .run = [](const Inputs& x) { return F::index_put(x[0], {x[1]}, x[2], {.accumulate = true}); }},
      {.name = "index_put_all_dims_accumulate",
       .inputs = {{3, 4}, ids({3}, {2, 0, 2}), ids({3}, {1, 3, 1}), {3}},
       .run = [](const Inputs& x) { return F::index_put(x[0], {x[1], x[2]}, x[3], {.accumulate = true}); }},
  };
}

std::vector<OpCase> indexing_cases() { return family_cases<mg::OpFamily::indexing>(); }

}  // namespace optest
