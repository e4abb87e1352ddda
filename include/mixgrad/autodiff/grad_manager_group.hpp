// mixgrad/autodiff/grad_manager_group.hpp — several GradManagers recording
// under one scope (MegEngine's `with gm1 | gm2:`).
//
//   mg::autodiff::GradManager gm_g, gm_d;        // e.g. generator and critic
//   gm_g.attach(gen.parameters());
//   gm_d.attach(critic.parameters());
//   {
//     auto recording = (gm_g | gm_d).record();   // both record from here
//     auto score = critic(gen(z));
//     gm_d.backward(score);                       // fills the critic's .grad()
//     gm_g.backward(score);                       // and then the generator's
//   }                                             // ends what is still recording
//
// Rules (MegEngine's GradManagerGroup):
// - Recording starts for every member, in order, or for none: a member that
//   already records, a member listed twice or an empty group is a StateError
//   and no member's state changes.
// - Each member records the ops that depend on its own attached tensors and
//   its backward fills only its own tensors' `.grad()`; a member's backward
//   ends that member's recording only, the others go on recording.
// - Members of one group do not see each other's backward: gradients computed
//   by one member's backward are plain tensors to the others (MegEngine
//   suppresses the other members while one runs backward).
// - Visibility by order between managers that are NOT grouped: an inner
//   manager (recording started later) never sees an outer manager's backward;
//   an outer manager records an inner manager's backward, as MegEngine does
//   (that is how nested managers give second derivatives; see
//   BackwardOptions::create_graph for the ops whose backward is not
//   differentiable: an outer backward through them throws StateError).
// - Groups flatten: `(gm1 | gm2) | gm3` is the group {gm1, gm2, gm3}.
//
// The group only lists managers (non-owning); they must outlive the group's
// recording scope.
#pragma once

#include <cstdint>
#include <vector>

#include "mixgrad/autodiff/grad_manager.hpp"

namespace mixgrad::autodiff {

/// RAII scope returned by GradManagerGroup::record(): ends, in reverse order,
/// the recording of each member that still records this group's recording.
class [[nodiscard]] GroupRecordingScope {
 public:
  GroupRecordingScope(std::vector<GradManager*> members, uint64_t token)
      : members_(std::move(members)), token_(token) {}
  GroupRecordingScope(GroupRecordingScope&& o) noexcept : members_(std::move(o.members_)), token_(o.token_) {
    o.members_.clear();
  }
  GroupRecordingScope(const GroupRecordingScope&) = delete;
  GroupRecordingScope& operator=(const GroupRecordingScope&) = delete;
  GroupRecordingScope& operator=(GroupRecordingScope&&) = delete;
  ~GroupRecordingScope();

 private:
  std::vector<GradManager*> members_;
  uint64_t token_;
};

/// An ordered list of GradManagers that start recording together.
class GradManagerGroup {
 public:
  /// The members in order; nested groups are written with operator|.
  explicit GradManagerGroup(std::vector<GradManager*> members) : members_(std::move(members)) {}

  /// Starts recording on every member in order (all or none, see the rules
  /// above); keep the returned scope alive for the duration.
  GroupRecordingScope record() const;

  const std::vector<GradManager*>& members() const { return members_; }

 private:
  std::vector<GradManager*> members_;
};

/// `gm1 | gm2`: the group {gm1, gm2}.
inline GradManagerGroup operator|(GradManager& a, GradManager& b) { return GradManagerGroup({&a, &b}); }
/// `group | gm`: the group's members followed by gm.
inline GradManagerGroup operator|(const GradManagerGroup& g, GradManager& b) {
  auto m = g.members();
  m.push_back(&b);
  return GradManagerGroup(std::move(m));
}
/// `gm | group`: gm followed by the group's members.
inline GradManagerGroup operator|(GradManager& a, const GradManagerGroup& g) {
  std::vector<GradManager*> m{&a};
  m.insert(m.end(), g.members().begin(), g.members().end());
  return GradManagerGroup(std::move(m));
}
/// `group | group`: both member lists, in order.
inline GradManagerGroup operator|(const GradManagerGroup& a, const GradManagerGroup& b) {
  auto m = a.members();
  m.insert(m.end(), b.members().begin(), b.members().end());
  return GradManagerGroup(std::move(m));
}

}  // namespace mixgrad::autodiff
