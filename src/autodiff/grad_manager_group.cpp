#include "mixgrad/autodiff/grad_manager_group.hpp"

#include <algorithm>
#include <string>

#include "autodiff/group_access.hpp"
#include "mixgrad/error.hpp"

namespace mixgrad::autodiff {

GroupRecordingScope::~GroupRecordingScope() {
  for (auto it = members_.rbegin(); it != members_.rend(); ++it) detail::release_in_group(**it, token_);
}

GroupRecordingScope GradManagerGroup::record() const {
  // Validate everything first: a refused group leaves every member as it was.
  if (members_.empty()) throw StateError("GradManagerGroup::record: the group has no GradManager");
  for (size_t i = 0; i < members_.size(); ++i) {
    if (members_[i] == nullptr)
      throw StateError("GradManagerGroup::record: member " + std::to_string(i) + " is a null GradManager");
    if (std::find(members_.begin(), members_.begin() + static_cast<std::ptrdiff_t>(i), members_[i]) !=
        members_.begin() + static_cast<std::ptrdiff_t>(i))
      throw StateError("GradManagerGroup::record: member " + std::to_string(i) +
                       " is listed twice; a GradManager records one history at a time");
    if (members_[i]->is_recording())
      throw StateError("GradManagerGroup::record: member " + std::to_string(i) +
                       " is already recording; end its recording (backward or release) before it joins a group");
  }
  const uint64_t token = detail::new_group_token();
  for (GradManager* gm : members_) detail::record_in_group(*gm, token);
  return GroupRecordingScope(members_, token);
}

}  // namespace mixgrad::autodiff
