// The global generator's state: a seed and how many counters were used.
// Each random op reserves a block of counters, so the sequence does not
// depend on threads or devices.
#pragma once

#include <cstdint>

namespace mixgrad::random_state {

uint64_t seed();
/// Reserves `n` counters and returns the first.
uint64_t reserve(uint64_t n);

/// The whole state: what a checkpoint saves to resume the same sequence.
struct State {
  uint64_t seed = 0;
  uint64_t counter = 0;  // the first counter not yet reserved
};
State get();
void set(const State& state);

}  // namespace mixgrad::random_state
