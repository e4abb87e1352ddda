// Registry cases of the scans: along the last, the leading and a middle axis
// (the latter of a transposed, non-contiguous input).
#include "op_registry.hpp"

namespace optest {

template <>
Cases cases_of<mg::OpKind::cumsum>() {
  namespace F = mg::F;
  return {
      {.name = "cumsum_last", .inputs = {{3, 4}}, .run = [](const Inputs& x) { return F::cumsum(x[0], -1); }},
      {.name = "cumsum_leading", .inputs = {{3, 2, 4}}, .run = [](const Inputs& x) { return F::cumsum(x[0], 0); }},
      {.name = "cumsum_middle_transposed",
       .inputs = {{4, 3, 2}},
       .run = [](const Inputs& x) { return F::cumsum(F::transpose(x[0], 0, 2), 1); }},
  };
}

template <>
Cases cases_of<mg::OpKind::cumprod>();  // cases_cumprod.cpp

std::vector<OpCase> scan_cases() { return family_cases<mg::OpFamily::scan>(); }

}  // namespace optest
