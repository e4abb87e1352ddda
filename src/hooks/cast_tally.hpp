// The ops' side of amp::detail::CastTally (mixgrad/amp/autocast.hpp,
// implemented in src/amp/autocast.cpp): F::astype counts and times its
// casts through these while a tally is alive, without including amp.
#pragma once

#include <cstdint>

namespace mixgrad::amp::detail {

/// True while a CastTally is alive on this thread.
bool cast_tally_active();
/// Adds one cast of `elements` elements that took `seconds` to the
/// innermost CastTally alive on this thread (nothing when none is).
void count_cast(uint64_t elements, double seconds);

}  // namespace mixgrad::amp::detail
