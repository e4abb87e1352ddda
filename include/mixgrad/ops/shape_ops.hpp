// mixgrad/ops/shape_ops.hpp — shape and type ops. Views share storage when
// they can (reshape of a contiguous tensor, narrow, squeeze, unsqueeze,
// transpose, permute, broadcast_to); all have gradients.
//
//   F::flatten(x, 1);               // [N, C, H, W] -> [N, C*H*W]
//   F::concat({a, b}, 0);
//   F::astype(x, DType::bfloat16);  // recorded cast: the gradient comes back in x's dtype
#pragma once

#include <vector>

#include "mixgrad/tensor.hpp"

namespace mixgrad::F {

Tensor reshape(const Tensor& x, const Shape& shape);
Tensor flatten(const Tensor& x, int start_dim = 0, int end_dim = -1);
Tensor transpose(const Tensor& x, int dim0, int dim1);
Tensor permute(const Tensor& x, const std::vector<int>& dims);
Tensor concat(const std::vector<Tensor>& xs, int axis = 0);
Tensor stack(const std::vector<Tensor>& xs, int axis = 0);
Tensor narrow(const Tensor& x, int dim, int64_t start, int64_t length);
/// Removes extent-1 dims (all, or only `dim`).
Tensor squeeze(const Tensor& x);
Tensor squeeze(const Tensor& x, int dim);
Tensor unsqueeze(const Tensor& x, int dim);
Tensor broadcast_to(const Tensor& x, const Shape& shape);
Tensor astype(const Tensor& x, DType dtype);
Tensor detach(const Tensor& x);

}  // namespace mixgrad::F
