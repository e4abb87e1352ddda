// Autocast as the ops see it: the calling thread's state, and the cast that
// applies an op's policy to its inputs. The user-facing scope, wrapper and
// global switch (mixgrad/amp/autocast.hpp) all act on this state.
#pragma once

#include <initializer_list>

#include "mixgrad/tensor.hpp"
#include "ops/op_kind.hpp"

namespace mixgrad::amp::detail {

/// True when autocast applies on this thread now (scope or global switch).
bool autocast_active();

/// Applies `op`'s policy to the defined, floating, non-float64 inputs:
/// replaces each handle by its cast (a recorded astype) where the policy asks.
void cast_inputs(OpKind op, std::initializer_list<Tensor*> inputs);

}  // namespace mixgrad::amp::detail

namespace mixgrad::amp {

/// The op-side hook: a no-op unless autocast is active.
inline void autocast_inputs(OpKind op, std::initializer_list<Tensor*> inputs) {
  if (detail::autocast_active()) detail::cast_inputs(op, inputs);
}

}  // namespace mixgrad::amp
