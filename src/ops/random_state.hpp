// The global generator's state: a seed and how many counters were used.
// Each random op reserves a block of counters, so the sequence does not
// depend on threads or devices.
#pragma once

#include <cstdint>

namespace mixgrad::random_state {

uint64_t seed();
/// Reserves `n` counters and returns the first.
uint64_t reserve(uint64_t n);

}  // namespace mixgrad::random_state
