// mixgrad/ops/distance.hpp — pairwise distances, as torch.cdist.
//
//   F::cdist(x1, x2);          // [.., P, M] x [.., R, M] -> [.., P, R], p = 2
//   F::cdist(x1, x2, 1.0);     // Manhattan distances
#pragma once

#include <limits>

#include "mixgrad/tensor.hpp"

namespace mixgrad::F {

/// How cdist computes p = 2 distances (PyTorch's compute_mode).
enum class CdistMode {
  /// The matrix product ||a||² + ||b||² - 2 a·b (clamped at 0) when P > 25 or
  /// R > 25 (PyTorch's use_mm_for_euclid_dist_if_necessary), else the direct
  /// difference.
  use_mm_for_euclid_dist_if_necessary,
  use_mm_for_euclid_dist,          // always the matrix product
  donot_use_mm_for_euclid_dist,    // always the difference
};

/// The p-norm distance between each row of x1 [.., P, M] and each row of x2
/// [.., R, M], batch dims broadcast: [.., P, R]. p >= 0 (0 counts the
/// differing elements; infinity is the largest difference). The gradient at
/// zero distance is 0, as PyTorch's. Floating operands of one dtype (float32
/// under autocast); ShapeError for ranks below 2 or differing M, ValueError
/// for p < 0.
Tensor cdist(const Tensor& x1, const Tensor& x2, double p = 2.0,
             CdistMode mode = CdistMode::use_mm_for_euclid_dist_if_necessary);

}  // namespace mixgrad::F
