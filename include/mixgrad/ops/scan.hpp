// mixgrad/ops/scan.hpp — scans: running results along one axis, as in
// PyTorch.
//
//   F::cumsum(x, -1);   // running sum along the last axis
//   F::cumsum(x, 0);    // down the rows
//
// The result has the input's shape and dtype; the running value is kept in
// float32 (float64 for float64 tensors) and rounded once per element.
// Floating tensors only (DTypeError otherwise); a bad axis is a ShapeError.
// Both errors name the op and the tensor.
#pragma once

#include "mixgrad/tensor.hpp"

namespace mixgrad::F {

/// Running sum along `dim` (torch.cumsum): out[.., k, ..] = sum of x[.., j, ..]
/// for j <= k, accumulated in float32 (float64 for float64); floating only.
Tensor cumsum(const Tensor& x, int dim);

}  // namespace mixgrad::F
