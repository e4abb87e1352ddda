// The layer-norm computation behind F::layer_norm, for ops that normalise
// rows too (group_norm and instance_norm view [N, C, *] as N * G rows).
//
//   Tensor y = ops::layer_norm_rows(OpKind::group_norm, x, Shape{cols}, Tensor(), Tensor(), eps);
#pragma once

#include "core/op_table.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::ops {

/// x normalised over its trailing `normalized_shape` elements, with an
/// optional weight and bias of that shape, in x's dtype; statistics in
/// float32 (float64 for float64 x). Recorded as `op`. The caller has validated the
/// inputs and applied its own autocast policy.
Tensor layer_norm_rows(OpKind op, const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                       const Tensor& bias, double eps);

}  // namespace mixgrad::ops
