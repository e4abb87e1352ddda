// Backend seam of the scans: running results along one axis (cumsum).
//
// Tensors are contiguous and viewed as [outer, axis, inner] around that axis
// (Axis3, backend/axis3.hpp). Each of the outer * inner lines is scanned on
// its own, in order along the axis, so the result is the same on every
// thread count.
//
//   backend::cumsum(x, backend::axis3(x.shape(), dim), /*reverse=*/false, out);
#pragma once

#include "backend/axis3.hpp"
#include "backend/dispatch.hpp"

namespace mixgrad::backend {

/// out = running sum of x along the axis (from the end when `reverse`: the
/// backward of cumsum), accumulated in float (double for float64).
MIXGRAD_STUB(cumsum, 3, void(const Tensor& x, Axis3 a, bool reverse, const Tensor& out));  // on out's device

}  // namespace mixgrad::backend
