// mixgrad/ops/max_unpool.hpp — the partial inverse of max pooling, as
// PyTorch's F.max_unpool1d / 2d / 3d: each input value goes back to
// the position its index names, zeros elsewhere.
//
//   F::max_unpool2d(pooled, indices, {.kernel_size = 2});   // [N, C, 2H, 2W]
//   F::max_unpool1d(pooled, indices, {.kernel_size = 3, .stride = 2});
//
// The indices are those of PyTorch's max_pool*d(return_indices=True): int64,
// x's shape, each the flat position of the maximum within its (n, c) plane
// of the output. mixgrad's max_pool ops return no indices.
#pragma once

#include "mixgrad/ops/options.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::F {

struct MaxUnpool2dOptions {
  Size2 kernel_size = 2;
  Size2 stride = 0;       // 0: same as kernel_size
  Size2 padding = 0;
  Size2 output_size = 0;  // 0: (H - 1)*stride - 2*padding + kernel_size
};
/// x and indices [N, C, H, W] or [C, H, W] -> [.., OH, OW]: out[n, c, k] =
/// x[n, c, i] where indices[n, c, i] == k (flat k = oh * OW + ow), 0 where
/// no index points. Linear in x (the gradient gathers at the indices), so
/// differentiable twice. Where two indices are equal their values add
/// (PyTorch leaves that case undefined). ShapeError for shapes that differ,
/// an output_size off the default by stride or more, an index outside the
/// output plane; DTypeError unless x is floating and indices int64. Under
/// autocast float32 on the CPU (PyTorch's CPU list), the input's dtype on
/// CUDA.
Tensor max_unpool2d(const Tensor& x, const Tensor& indices, const MaxUnpool2dOptions& options = {});

struct MaxUnpool1dOptions {
  int64_t kernel_size = 2;
  int64_t stride = 0;       // 0: same as kernel_size
  int64_t padding = 0;
  int64_t output_size = 0;  // 0: (L - 1)*stride - 2*padding + kernel_size
};
/// max_unpool2d for sequences: x and indices [N, C, L] or [C, L].
Tensor max_unpool1d(const Tensor& x, const Tensor& indices, const MaxUnpool1dOptions& options = {});

struct MaxUnpool3dOptions {
  Size3 kernel_size = 2;
  Size3 stride = 0;       // 0: same as kernel_size
  Size3 padding = 0;
  Size3 output_size = 0;  // 0: (D - 1)*stride - 2*padding + kernel_size, per dim
};
/// max_unpool2d for volumes: x and indices [N, C, D, H, W] or [C, D, H, W],
/// each index the flat position od * OH * OW + oh * OW + ow in its (n, c)
/// volume of the output (PyTorch's max_pool3d(return_indices=True)).
Tensor max_unpool3d(const Tensor& x, const Tensor& indices, const MaxUnpool3dOptions& options = {});

}  // namespace mixgrad::F
