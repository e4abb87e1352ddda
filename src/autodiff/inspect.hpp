// Read-only views of a GradManager's internals for tests and tuning.
#pragma once

#include <cstddef>

namespace mixgrad::autodiff {
class GradManager;
namespace detail {
/// The number of ops on gm's tape now (0 when it does not record).
size_t tape_size(const GradManager& gm);
}  // namespace detail
}  // namespace mixgrad::autodiff
