// The frozen set, by tensor id, for the GradManager's recording (see
// mixgrad/autodiff/freeze.hpp).
#pragma once

#include <cstdint>

namespace mixgrad::autodiff::detail {

/// True when the tensor with this id is frozen; one relaxed atomic load while
/// nothing is frozen.
bool is_frozen_id(uint64_t id);

}  // namespace mixgrad::autodiff::detail
