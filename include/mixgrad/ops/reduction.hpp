// mixgrad/ops/reduction.hpp — reductions over axes, with keepdim.
//
//   F::sum(x);                 // all elements, a 0-d tensor
//   F::mean(x, {0, 2}, true);  // over axes 0 and 2, kept as extent 1
//   F::argmax(logits, 1);      // int64 indices
#pragma once

#include "mixgrad/ops/options.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::F {

Tensor sum(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
/// Largest element; the gradient goes to the (first) maximal element.
Tensor max(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
Tensor min(const Tensor& x, const Axes& axes = {}, bool keepdim = false);
/// Index (int64) of the first largest element along one axis.
Tensor argmax(const Tensor& x, int axis, bool keepdim = false);
/// Variance with `correction` (0: population, 1: sample/Bessel).
Tensor var(const Tensor& x, const Axes& axes = {}, bool keepdim = false, int correction = 0);
/// p-norm (p = 2 by default) over axes.
Tensor norm(const Tensor& x, double p = 2.0, const Axes& axes = {}, bool keepdim = false);
/// Sums a broadcast result back to `shape` (the inverse of broadcast_to);
/// what every broadcasting op's backward uses.
Tensor sum_to(const Tensor& x, const Shape& shape);

}  // namespace mixgrad::F
