// Element math of the losses, layer norm and dropout, as small functors the
// CPU loops (backend/cpu/loss.cpp, layer_norm.cpp, dropout.cpp) and a future
// CUDA backend share. Every functor works in the accumulation type `Acc`
// (float, or double for float64 tensors); the loops convert at the edges.
//
//   kernels::MseLoss<float> f;
//   float l = f.value(pred, target);            // (pred - target)^2
//   float gp = f.grad_pred(pred, target);       // 2 (pred - target)
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/cast.hpp"
#include "kernels/philox.hpp"

namespace mixgrad::kernels {

// ---- cross-entropy ---------------------------------------------------------
//
// With m the row maximum and z_j = x_j - m, the log-sum-exp is
// m + log(sum_j exp(z_j)), and every quantity below is written in z so that
// large logits never overflow and never cancel catastrophically.

/// The label-smoothed target distribution: `on` at the label, `off` at every
/// other class (on = 1 - s + s / C, off = s / C; they sum to 1).
template <class Acc>
struct SmoothedTarget {
  Acc on;
  Acc off;
  MIXGRAD_HOST_DEVICE SmoothedTarget(Acc smoothing, int64_t classes)
      : on(Acc(1) - smoothing + smoothing / static_cast<Acc>(classes)),
        off(smoothing / static_cast<Acc>(classes)) {}
};

/// The loss of one sample: -sum_j q_j log softmax(x)_j
///   = log_sum - (1 - s) z_label - (s / C) sum_j z_j,
/// where log_sum = log(sum_j exp(z_j)).
template <class Acc>
struct CrossEntropySample {
  Acc smoothing;
  Acc inv_classes;
  MIXGRAD_HOST_DEVICE Acc operator()(Acc log_sum, Acc z_label, Acc z_sum) const {
    return log_sum - (Acc(1) - smoothing) * z_label - smoothing * inv_classes * z_sum;
  }
};

/// d loss / d x_j = scale * (softmax_j - q_j), the fused backward.
template <class Acc>
MIXGRAD_HOST_DEVICE inline Acc cross_entropy_grad(Acc z, Acc log_sum, Acc target, Acc scale) {
  return scale * (std::exp(z - log_sum) - target);
}

// ---- pointwise losses ------------------------------------------------------

/// (p - t)^2.
template <class Acc>
struct MseLoss {
  MIXGRAD_HOST_DEVICE Acc value(Acc p, Acc t) const { return (p - t) * (p - t); }
  MIXGRAD_HOST_DEVICE Acc grad_pred(Acc p, Acc t) const { return Acc(2) * (p - t); }
  MIXGRAD_HOST_DEVICE Acc grad_target(Acc p, Acc t) const { return Acc(2) * (t - p); }
};

/// |p - t|; the subgradient at p == t is 0.
template <class Acc>
struct L1Loss {
  MIXGRAD_HOST_DEVICE Acc value(Acc p, Acc t) const { return std::abs(p - t); }
  MIXGRAD_HOST_DEVICE Acc grad_pred(Acc p, Acc t) const { return p > t ? Acc(1) : (p < t ? Acc(-1) : Acc(0)); }
  MIXGRAD_HOST_DEVICE Acc grad_target(Acc p, Acc t) const { return -grad_pred(p, t); }
};

/// Binary cross-entropy on logits x with target t in [0, 1]:
/// -t log sigmoid(x) - (1 - t) log(1 - sigmoid(x)) = max(x, 0) - x t + log1p(exp(-|x|)),
/// which neither overflows nor loses the small tail for large |x|.
template <class Acc>
struct BceWithLogitsLoss {
  MIXGRAD_HOST_DEVICE Acc value(Acc x, Acc t) const {
    return (x > Acc(0) ? x : Acc(0)) - x * t + std::log1p(std::exp(-std::abs(x)));
  }
  MIXGRAD_HOST_DEVICE Acc grad_pred(Acc x, Acc t) const {
    // sigmoid(x) without exp of a large positive argument
    const Acc e = std::exp(-std::abs(x));
    const Acc s = x >= Acc(0) ? Acc(1) / (Acc(1) + e) : e / (Acc(1) + e);
    return s - t;
  }
  MIXGRAD_HOST_DEVICE Acc grad_target(Acc x, Acc) const { return -x; }
};

// ---- layer norm ------------------------------------------------------------

/// y = (x - mean) * rstd * w + b for one element.
template <class Acc>
MIXGRAD_HOST_DEVICE inline Acc layer_norm_value(Acc x, Acc mean, Acc rstd, Acc w, Acc b) {
  return (x - mean) * rstd * w + b;
}

/// dx_j = rstd * (dy_j - mean(dy) - xhat_j * mean(dy * xhat)) with dy = g * w:
/// the gradient through the row's mean and variance, in one expression.
template <class Acc>
MIXGRAD_HOST_DEVICE inline Acc layer_norm_grad_x(Acc dy, Acc xhat, Acc rstd, Acc mean_dy, Acc mean_dy_xhat) {
  return rstd * (dy - mean_dy - xhat * mean_dy_xhat);
}

// ---- dropout ---------------------------------------------------------------

/// The keep mask of one dropout call. Element i is decided by word i % 4 of
/// the Philox block at counter first + i / 4, so the mask depends only on
/// (seed, first, i): the same on any thread count, and regenerated exactly
/// by the backward instead of being stored.
struct DropoutMask {
  uint64_t seed = 0;
  uint64_t first = 0;
  /// An element is kept when its 32-bit word is >= threshold = round(p 2^32),
  /// which happens with probability 1 - p (to within 2^-32).
  uint64_t threshold = 0;

  /// Counters one call over n elements uses.
  MIXGRAD_HOST_DEVICE static uint64_t counters(int64_t n) { return (static_cast<uint64_t>(n) + 3) / 4; }

  /// Keep flags of elements 4 * block .. 4 * block + 3.
  MIXGRAD_HOST_DEVICE void keep4(uint64_t block, bool keep[4]) const {
    const auto r = philox(seed, first + block);
    for (int k = 0; k < 4; ++k) keep[k] = r[k] >= threshold;
  }
};

}  // namespace mixgrad::kernels
