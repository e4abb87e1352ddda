// mixgrad/ops/reduction.hpp — reductions over axes, with keepdim.
//
//   F::sum(x);                 // all elements, a 0-d tensor
//   F::mean(x, {0, 2}, true);  // over axes 0 and 2, kept as extent 1
//   F::argmax(logits, 1);      // int64 indices
//   F::prod(x, 1, true);       // product along axis 1, kept as extent 1
//
// Sums accumulate in float32 (float64 for float64 tensors) whatever the
// element dtype, and the result has the input's dtype, except that integer
// and bool tensors sum to int64 (so a bool mask sums to a count). mean, var,
// norm and prod need floating tensors. NaN propagates through max and min.
// Errors (ShapeError for a bad or repeated axis or an empty max / min,
// DTypeError for a dtype the op does not take) name the op and the tensor.
#pragma once

#include "mixgrad/ops/options.hpp"
#include "mixgrad/ops/scan.hpp"  // cumsum, a scan, was declared here: code that took it from here still compiles
#include "mixgrad/tensor.hpp"

namespace mixgrad::F {

/// Sum over `axes` (all by default); keepdim keeps them as extent 1.
Tensor sum(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
/// Mean over `axes` (all by default); floating tensors only.
Tensor mean(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
/// Largest element; the gradient goes to the (first) maximal element.
Tensor max(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
/// Smallest element; the gradient goes to the (first) minimal element.
Tensor min(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
/// Index (int64) of the first largest element along one axis (NaN counts as
/// the largest). No gradient.
Tensor argmax(const Tensor& x, int axis, bool keepdim = false);
/// Variance with `correction` (0: population, 1: sample/Bessel), computed in
/// two passes (mean, then squared deviations) so large means cost no precision.
Tensor var(const Tensor& x, const Axes& axes = {}, bool keepdim = false, int correction = 0);
/// p-norm (p = 2 by default, any p > 0, or infinity for max |x|) over axes.
/// The gradient at a zero norm is zero.
Tensor norm(const Tensor& x, double p = 2.0, const Axes& axes = {}, bool keepdim = false);
/// Product along `dim` (torch.prod(x, dim, keepdim)), accumulated in float32
/// (float64 for float64); floating only. The gradient is the product of the
/// other elements, exact where the line holds zeros.
Tensor prod(const Tensor& x, int dim, bool keepdim = false);
/// Sums a broadcast result back to `shape` (the inverse of broadcast_to);
/// what every broadcasting op's backward uses.
Tensor sum_to(const Tensor& x, const Shape& shape);

}  // namespace mixgrad::F
