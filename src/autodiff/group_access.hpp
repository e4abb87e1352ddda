// The GradManager internals GradManagerGroup needs: recording as a member of
// a group, so that the members' backward passes do not count as nested.
#pragma once

#include <cstdint>

namespace mixgrad::autodiff {
class GradManager;
namespace detail {
/// A fresh nonzero group token (never reused in the process).
uint64_t new_group_token();
/// Starts recording gm as a member of group `token`; gm must not record yet.
void record_in_group(GradManager& gm, uint64_t token);
/// Ends gm's recording if it still records as a member of group `token`.
void release_in_group(GradManager& gm, uint64_t token);
}  // namespace detail
}  // namespace mixgrad::autodiff
