// Element math of the losses, as small functors the CPU loops
// (backend/cpu/loss.cpp) and the CUDA kernels (backend/cuda/loss.cu) share.
// Every functor works in the accumulation type `Acc` (float, or double for
// float64 tensors); the loops convert at the edges. exp and log1p go through
// kernels::math: float through kernels/fast_float.hpp, so loops vectorise.
//
//   kernels::MseLoss<float> f;
//   float l = f.value(pred, target);            // (pred - target)^2
//   float gp = f.grad_pred(pred, target);       // 2 (pred - target)
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/element_inline.hpp"
#include "kernels/cast.hpp"
#include "kernels/value_math.hpp"

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
  MIXGRAD_ELEMENT SmoothedTarget(Acc smoothing, int64_t classes)
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
  MIXGRAD_ELEMENT Acc operator()(Acc log_sum, Acc z_label, Acc z_sum) const {
    return log_sum - (Acc(1) - smoothing) * z_label - smoothing * inv_classes * z_sum;
  }
};

/// d loss / d x_j = scale * (softmax_j - q_j), the fused backward.
template <class Acc>
MIXGRAD_ELEMENT Acc cross_entropy_grad(Acc z, Acc log_sum, Acc target, Acc scale) {
  return scale * (math::exp(z - log_sum) - target);
}

// ---- pointwise losses ------------------------------------------------------

/// (p - t)^2.
template <class Acc>
struct MseLoss {
  MIXGRAD_ELEMENT Acc value(Acc p, Acc t) const { return (p - t) * (p - t); }
  MIXGRAD_ELEMENT Acc grad_pred(Acc p, Acc t) const { return Acc(2) * (p - t); }
  MIXGRAD_ELEMENT Acc grad_target(Acc p, Acc t) const { return Acc(2) * (t - p); }
};

/// |p - t|; the subgradient at p == t is 0.
template <class Acc>
struct L1Loss {
  MIXGRAD_ELEMENT Acc value(Acc p, Acc t) const { return std::abs(p - t); }
  MIXGRAD_ELEMENT Acc grad_pred(Acc p, Acc t) const { return p > t ? Acc(1) : (p < t ? Acc(-1) : Acc(0)); }
  MIXGRAD_ELEMENT Acc grad_target(Acc p, Acc t) const { return -grad_pred(p, t); }
};

/// Binary cross-entropy on logits x with target t in [0, 1]:
/// -t log sigmoid(x) - (1 - t) log(1 - sigmoid(x)) = max(x, 0) - x t + log1p(exp(-|x|)),
/// which neither overflows nor loses the small tail for large |x|.
template <class Acc>
struct BceWithLogitsLoss {
  MIXGRAD_ELEMENT Acc value(Acc x, Acc t) const {
    return (x > Acc(0) ? x : Acc(0)) - x * t + math::log1p(math::exp(-std::abs(x)));
  }
  MIXGRAD_ELEMENT Acc grad_pred(Acc x, Acc t) const {
    // sigmoid(x) without exp of a large positive argument
    const Acc e = math::exp(-std::abs(x));
    const Acc s = x >= Acc(0) ? Acc(1) / (Acc(1) + e) : e / (Acc(1) + e);
    return s - t;
  }
  MIXGRAD_ELEMENT Acc grad_target(Acc x, Acc) const { return -x; }
};

}  // namespace mixgrad::kernels
