// Registry cases of the sorting ops: along the last, the leading and a
// middle axis (the latter of a transposed input), largest and smallest
// first. Inputs hold distinct values, so the order is the same in every
// dtype and under a finite-difference step.
#include <vector>

#include "op_registry.hpp"

namespace optest {

namespace {

/// A permutation of distinct values 0.125 apart (exact in every floating
/// dtype), so no near-tie makes the order differ between dtypes or under a
/// finite-difference step.
InputSpec distinct(mg::Shape s) {
  return InputSpec(
      s,
      [s](mg::DType dt) {
        const int64_t n = s.numel();
        std::vector<double> v(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) v[j] = static_cast<double>((j * 7) % n) * 0.125 - 1.0;
        return mg::tensor(v, s, dt);
      },
      true);
}

}  // namespace

template <>
Cases cases_of<mg::OpKind::topk>() {
  namespace F = mg::F;
  return {
      {.name = "topk_last", .inputs = {distinct({3, 5})}, .run = [](const Inputs& x) { return F::topk(x[0], 2).values; }},
      {.name = "topk_leading_smallest",
       .inputs = {distinct({4, 3})},
       .run = [](const Inputs& x) { return F::topk(x[0], 3, 0, false).values; }},
      {.name = "topk_middle_transposed",
       .inputs = {distinct({4, 3, 2})},
       .run = [](const Inputs& x) { return F::topk(F::transpose(x[0], 0, 2), 2, 1).values; }},
  };
}

template <>
Cases cases_of<mg::OpKind::sort>() {
  namespace F = mg::F;
  return {
      {.name = "sort_last", .inputs = {distinct({3, 5})}, .run = [](const Inputs& x) { return F::sort(x[0]).values; }},
      {.name = "sort_leading_descending",
       .inputs = {distinct({4, 3})},
       .run = [](const Inputs& x) { return F::sort(x[0], 0, true).values; }},
      {.name = "argsort_middle",
       .inputs = {distinct({2, 5, 3})},
       .run = [](const Inputs& x) { return F::argsort(x[0], 1); },
       .check_low_precision = false,
       .check_gradient = false},
  };
}

std::vector<OpCase> sorting_cases() { return family_cases<mg::OpFamily::sorting>(); }

}  // namespace optest
