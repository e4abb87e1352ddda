// Registry cases of cumprod: along the last and the leading axis, of a
// transposed view, and of an input holding zeros (whose gradient PyTorch
// computes exactly, as the composition's product rule does).
#include <vector>

#include "op_registry.hpp"

namespace optest {

template <>
Cases cases_of<mg::OpKind::cumprod>() {
  namespace F = mg::F;
  auto with_zeros = [](mg::DType dtype) {
    return mg::tensor(std::vector<double>{0.5, 0.0, -1.5, 0.75, 1.25, -0.5, 0.0, 0.0, 2.0, 0.25, -1.0, 0.0}, {3, 4},
                      dtype);
  };
  return {
      {.name = "cumprod_last", .inputs = {InputSpec({3, 5}, 0.5, 1.5)}, .run = [](const Inputs& x) { return F::cumprod(x[0], -1); }},
      {.name = "cumprod_leading", .inputs = {{4, 2, 3}}, .run = [](const Inputs& x) { return F::cumprod(x[0], 0); }},
      {.name = "cumprod_middle_transposed",
       .inputs = {{4, 3, 2}},
       .run = [](const Inputs& x) { return F::cumprod(F::transpose(x[0], 0, 2), 1); }},
      {.name = "cumprod_with_zeros",
       .inputs = {InputSpec({3, 4}, with_zeros, true)},
       .run = [](const Inputs& x) { return F::cumprod(x[0], 1); }},
  };
}

}  // namespace optest
