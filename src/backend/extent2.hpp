// A pair of extents (height, width) for the 2-d backend families (conv,
// pooling): the backend's own plain type, so its headers need nothing from
// the public op options. The ops translate their `Size2` options into it.
//
//   backend::Conv2dParams p{.stride = 2, .padding = {1, 0}};
#pragma once

#include <cstdint>

namespace mixgrad::backend {

/// An integer means the same for both, as with the public Size2, so
/// `.padding = 1` cannot leave the width at 0 by accident.
struct Extent2 {
  int64_t h = 0;
  int64_t w = 0;
  constexpr Extent2() = default;
  constexpr Extent2(int64_t v) : h(v), w(v) {}  // NOLINT(google-explicit-constructor)
  constexpr Extent2(int64_t h_, int64_t w_) : h(h_), w(w_) {}
};

}  // namespace mixgrad::backend
