#include "op_registry.hpp"

namespace optest {

std::vector<OpCase> shape_cases() {
  using mg::F::concat;
  return {
      {.name = "reshape", .inputs = {{2, 3, 4}}, .run = [](const Inputs& x) { return mg::F::reshape(x[0], {4, -1}); }},
      {.name = "reshape_of_transposed",
       .inputs = {{3, 4}},
       .run = [](const Inputs& x) { return mg::F::reshape(mg::F::transpose(x[0], 0, 1), {12}); }},
      {.name = "flatten", .inputs = {{2, 3, 2, 2}}, .run = [](const Inputs& x) { return mg::F::flatten(x[0], 1); }},
      {.name = "transpose", .inputs = {{2, 3, 4}}, .run = [](const Inputs& x) { return mg::F::transpose(x[0], 0, 2); }},
      {.name = "permute", .inputs = {{2, 3, 4}}, .run = [](const Inputs& x) { return mg::F::permute(x[0], {1, 2, 0}); }},
      {.name = "concat",
       .inputs = {{2, 3}, {4, 3}},
       .run = [](const Inputs& x) { return concat({x[0], x[1]}, 0); }},
      {.name = "concat_axis1",
       .inputs = {{2, 3}, {2, 1}},
       .run = [](const Inputs& x) { return concat({x[0], x[1], x[0]}, -1); }},
      {.name = "stack", .inputs = {{2, 3}, {2, 3}}, .run = [](const Inputs& x) { return mg::F::stack({x[0], x[1]}, 1); }},
      {.name = "narrow", .inputs = {{4, 5}}, .run = [](const Inputs& x) { return mg::F::narrow(x[0], 1, 1, 3); }},
      {.name = "squeeze_unsqueeze",
       .inputs = {{3, 1, 4}},
       .run = [](const Inputs& x) { return mg::F::unsqueeze(mg::F::squeeze(x[0], 1), 0); }},
      {.name = "broadcast_to", .inputs = {{3, 1}}, .run = [](const Inputs& x) { return mg::F::broadcast_to(x[0], {2, 3, 4}); }},
      {.name = "sum_to", .inputs = {{2, 3, 4}}, .run = [](const Inputs& x) { return mg::F::sum_to(x[0], {3, 1}); }},
  };
}

}  // namespace optest
