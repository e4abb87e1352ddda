// mixgrad/ops/grid_sample.hpp — sampling an image at given points, as
// PyTorch's F.grid_sample (4-d input: spatial transformers, optical flow).
//
//   F::grid_sample(x, grid);   // x [N, C, H, W], grid [N, OH, OW, 2] in [-1, 1]
//   F::grid_sample(x, grid, {.mode = F::GridSampleMode::nearest,
//                            .padding_mode = F::GridSamplePadding::reflection,
//                            .align_corners = true});
#pragma once

#include "mixgrad/tensor.hpp"

namespace mixgrad::F {

enum class GridSampleMode { bilinear, nearest };
enum class GridSamplePadding { zeros, border, reflection };

struct GridSampleOptions {
  GridSampleMode mode = GridSampleMode::bilinear;
  GridSamplePadding padding_mode = GridSamplePadding::zeros;
  /// True: -1 and 1 are the centres of the corner pixels; false (PyTorch's
  /// default): their outer edges.
  bool align_corners = false;
};

/// out[n, c, i, j] = x[n, c] sampled at grid[n, i, j] = (x, y), both in
/// [-1, 1] across the width and the height, as PyTorch's grid_sample:
/// bilinear between the 4 nearest pixels or the nearest one (ties to even);
/// points outside read zeros, the border pixels, or the image reflected at
/// its border. Differentiable in x and (bilinear) in grid, twice; the
/// gradient of nearest in grid is 0, as PyTorch's. The padding and the
/// sampled pixels are worked out on the host from the grid's values (on
/// CUDA one copy of the grid to the host). ShapeError unless x is 4-d and
/// grid [N, OH, OW, 2]; DTypeError unless both are floating of one dtype.
/// Under autocast float32 on the CPU (PyTorch's CPU list), the wider of the
/// two dtypes on CUDA (PyTorch's promote list).
Tensor grid_sample(const Tensor& x, const Tensor& grid, const GridSampleOptions& options = {});

}  // namespace mixgrad::F
