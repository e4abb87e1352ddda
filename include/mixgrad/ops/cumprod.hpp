// mixgrad/ops/cumprod.hpp — the running product along one axis, as
// torch.cumprod.
//
//   F::cumprod(x, -1);   // out[..., k] = x[..., 0] * ... * x[..., k]
#pragma once

#include "mixgrad/tensor.hpp"

namespace mixgrad::F {

/// Running product along `dim`: out[.., k, ..] = prod of x[.., j, ..] for
/// j <= k; floating only (DTypeError), a bad axis is a ShapeError. The
/// gradient is PyTorch's: exact where x has zeros (it is not computed as
/// out / x), and differentiable again. Under autocast it runs in float32.
Tensor cumprod(const Tensor& x, int dim);

}  // namespace mixgrad::F
