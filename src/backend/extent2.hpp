// A pair of extents (height, width) for the 2-d backend families (conv,
// pooling): the backend's own plain type, so its headers need nothing from
// the public op options. The ops translate their `Size2` options into it.
//
//   backend::Conv2dParams p{.stride = {2, 2}, .padding = {1, 1}};
#pragma once

#include <cstdint>

namespace mixgrad::backend {

struct Extent2 {
  int64_t h = 0;
  int64_t w = 0;
};

}  // namespace mixgrad::backend
