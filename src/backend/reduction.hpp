// Backend seam of the reduction family, and the per-channel sums that bias
// gradients need (sum_channels). prod reduces one axis of the
// [outer, axis, inner] view (backend/axis3.hpp); its gradient, the product
// of the other elements, is a prefix times a suffix product along it.
//
// `reduce` folds the dimensions of x named by a bit mask (bit d set: reduce
// dimension d) and writes one value per kept position into `out`, a
// contiguous tensor whose elements are the kept positions in row-major
// order (so `out` may have the keepdim shape or the squeezed one).
// Accumulation is in float (double for float64, int64 for integers and
// bool); the result is converted to out's dtype.
//
//   Tensor out = empty({C}, x.dtype());
//   backend::reduce(ReduceOp::sum, x, 0b1101, out, {});   // [N, C, H, W] -> [C]
#pragma once

#include <cstdint>

#include "backend/axis3.hpp"
#include "backend/dispatch.hpp"

namespace mixgrad::backend {

enum class ReduceOp : uint8_t { sum, mean, max, min, norm, var };
enum class ArgReduceOp : uint8_t { max, min };

struct ReduceParams {
  double p = 2.0;      // norm: the order (inf allowed)
  int correction = 0;  // var: divide by n - correction
};

/// out = op over the masked axes of x (see the file comment). An empty
/// reduction gives the identity (0 for sums, NaN for mean and var); max and
/// min of nothing are the caller's to reject.
MIXGRAD_STUB(reduce, 3,
             void(ReduceOp op, const Tensor& x, uint32_t axes, const Tensor& out,
                  const ReduceParams& params));  // on out's device
/// out (int64, contiguous, x's shape without `axis`) = index of the first
/// largest (smallest) element along `axis`; NaN counts as the largest (and
/// the smallest), so the first NaN wins.
MIXGRAD_STUB(arg_reduce, 3, void(ArgReduceOp op, const Tensor& x, int axis, const Tensor& out));  // on out's device
/// dst[k, index[k]] = values[k] for a contiguous 2-d dst; the other elements
/// are left as they are.
MIXGRAD_STUB(put_along_last_axis, 2,
             void(const Tensor& values, const Tensor& index, const Tensor& dst));  // on dst's device
/// dx = grad * scale * (x - mean); grad and mean broadcast to x's shape.
MIXGRAD_STUB(var_grad, 4,
             void(const Tensor& grad, const Tensor& x, const Tensor& mean, double scale,
                  const Tensor& dx));  // on dx's device
/// dx = d||x||_p/dx * grad; grad and norm broadcast to x's shape.
MIXGRAD_STUB(norm_grad, 4,
             void(const Tensor& grad, const Tensor& x, const Tensor& norm, double p,
                  const Tensor& dx));  // on dx's device
/// out [outer, inner] = product of x along the axis, accumulated in float
/// (double for float64).
MIXGRAD_STUB(prod, 2, void(const Tensor& x, Axis3 a, const Tensor& out));  // on out's device
/// dx = g * (product of the other elements of x's line), exact with zeros
/// in the line (no division by them); g [outer, inner].
MIXGRAD_STUB(prod_grad, 3, void(const Tensor& g, const Tensor& x, Axis3 a, const Tensor& dx));  // on dx's device

/// out[c] = sum over o < outer, i < inner of x[o, c, i], x contiguous and
/// viewed as [outer, channels, inner]; out [channels], any floating dtype.
/// Sums in float32 (float64 for float64): the bias gradient of linear / conv.
MIXGRAD_STUB(sum_channels, 4,
             void(const Tensor& x, int64_t outer, int64_t channels, int64_t inner,
                  const Tensor& out));  // on out's device

}  // namespace mixgrad::backend
