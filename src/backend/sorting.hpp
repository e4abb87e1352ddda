// Backend seam of the sorting ops (topk, sort, argsort).
//
// The input is contiguous and viewed as [outer, axis, inner] (Axis3); each
// of its outer * inner lines along the axis is ordered on its own, and the
// first k positions of the order are written to values and indices, both
// [outer, k, inner].
//
//   backend::sort_lines(x, a, /*k=*/a.axis, /*descending=*/false, values, indices);
#pragma once

#include <cstdint>

#include "backend/axis3.hpp"
#include "backend/dispatch.hpp"

namespace mixgrad::backend {

/// The first k elements of each line in ascending (descending) order, NaN
/// counted as the largest, ties in input order; values in x's dtype, indices
/// int64.
MIXGRAD_STUB(sort_lines, 4,
             void(const Tensor& x, Axis3 a, int64_t k, bool descending, const Tensor& values,
                  const Tensor& indices));  // on values's device

}  // namespace mixgrad::backend
