// Fixtures shared by the autocast suites.
#pragma once

#include "mixgrad/mixgrad.hpp"

namespace autocast_test {

/// Puts the global autocast settings back to their defaults when a test
/// ends, whatever it changed: off, and both dtypes unchosen (reset(), not an
/// assignment, so the next test sees the per-device default again).
struct GlobalsGuard {
  ~GlobalsGuard() {
    mixgrad::amp::enabled = false;
    mixgrad::amp::low_prec_dtype.reset();
    mixgrad::amp::high_prec_dtype.reset();
  }
};

/// A float32 parameter-like tensor, uniform in [-1, 1).
inline mixgrad::Tensor param(mixgrad::Shape s) { return mixgrad::uniform(s, -1, 1); }

}  // namespace autocast_test
