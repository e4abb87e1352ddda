#include "op_registry.hpp"

namespace optest {

std::vector<OpCase> loss_cases() { return {}; }

}  // namespace optest
