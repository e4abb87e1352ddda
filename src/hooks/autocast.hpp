// Autocast as the ops see it: the calling thread's state, and the cast that
// applies an op's policy to its inputs. The user-facing scope, wrapper and
// global switch (mixgrad/amp/autocast.hpp) all act on this state. A hook
// below ops (hooks/), implemented by amp (above ops).
#pragma once

#include <initializer_list>
#include <optional>
#include <span>
#include <vector>

#include "mixgrad/tensor.hpp"
#include "core/op_table.hpp"

namespace mixgrad::amp::detail {

/// True when autocast applies on this thread now (scope or global switch).
bool autocast_active();

/// Applies `op`'s policy for the inputs' device type (the op table's column)
/// to the defined, floating, non-float64 inputs: replaces each handle by its
/// cast (a recorded astype) where the policy asks.
void cast_inputs(OpKind op, std::span<Tensor* const> inputs);

/// Replaces `op`'s policy (on every device) on this thread while it lives.
/// A test seam, kept in the library because it is the only way to show that
/// an op reads its table entry: where the table's choice coincides with the
/// op's own type promotion (concat), no other observable changes.
class [[nodiscard]] PolicyOverride {
 public:
  PolicyOverride(OpKind op, CastPolicy p);
  ~PolicyOverride();
  PolicyOverride(const PolicyOverride&) = delete;
  PolicyOverride& operator=(const PolicyOverride&) = delete;

 private:
  OpKind op_;
  std::optional<CastPolicy> saved_;
};

/// Turns autocast off on this thread while it lives: for an op whose
/// composed math picks its own dtypes (attention's fallback, which runs 16-bit
/// inputs in float32 as the fused kernels do), so that the ops inside are
/// not cast back down.
class [[nodiscard]] AutocastOff {
 public:
  AutocastOff();
  ~AutocastOff();
  AutocastOff(const AutocastOff&) = delete;
  AutocastOff& operator=(const AutocastOff&) = delete;

 private:
  bool had_scope_ = false;
  bool was_enabled_ = false;
};

}  // namespace mixgrad::amp::detail

namespace mixgrad::amp {

/// The op-side hook: a no-op unless autocast is active.
inline void autocast_inputs(OpKind op, std::initializer_list<Tensor*> inputs) {
  if (detail::autocast_active()) detail::cast_inputs(op, std::span<Tensor* const>(inputs.begin(), inputs.size()));
}

/// The same for a list of inputs (concat, stack).
inline void autocast_inputs(OpKind op, std::vector<Tensor>& inputs) {
  if (!detail::autocast_active()) return;
  std::vector<Tensor*> ptrs;
  ptrs.reserve(inputs.size());
  for (Tensor& t : inputs) ptrs.push_back(&t);
  detail::cast_inputs(op, ptrs);
}

}  // namespace mixgrad::amp
