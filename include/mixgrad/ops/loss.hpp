// mixgrad/ops/loss.hpp — losses. Each is one fused kernel forward and one
// backward, computed in float32 (float64 for float64 input) whatever the
// input dtype; the result has the input's dtype. Under autocast the losses
// run in high precision (their inputs are cast to float32 first). Every loss
// takes its reduction the same way, as the `.reduction` field of its options.
//
//   auto loss = F::cross_entropy(logits, labels);          // mean over the batch
//   auto l = F::cross_entropy(logits, labels, {.label_smoothing = 0.1});
//   auto per_pixel = F::cross_entropy(seg_logits, masks, {.reduction = Reduction::none});  // [N, C, H, W] -> [N, H, W]
//   auto r = F::mse_loss(pred, target, {.reduction = Reduction::sum});
//   auto h = F::smooth_l1_loss(pred, target, {.beta = 0.5});   // PyTorch's argument semantics
//
// The losses below binary_cross_entropy_with_logits are composed of F:: ops
// (ops/loss_composed.cpp): twice differentiable on every device, in float32
// under autocast (PyTorch's fp32 lists), otherwise in the inputs' dtype.
// Targets and predictions must have the same shape; differing floating
// dtypes are promoted. Scalar arguments must be finite (ValueError).
#pragma once

#include "mixgrad/ops/options.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::F {

/// Options of nll_loss and the pointwise losses.
struct LossOptions {
  /// mean (default) and sum give a 0-d tensor, none the per-element values.
  Reduction reduction = Reduction::mean;
};

/// Options of cross_entropy: LossOptions' reduction, and two more.
struct CrossEntropyOptions {
  Reduction reduction = Reduction::mean;
  /// s in [0, 1]: the target puts 1 - s + s / C on the label and s / C on
  /// every other class.
  double label_smoothing = 0.0;
  int axis = 1;  // the class axis of the logits
};

/// Softmax cross-entropy between logits ([N, C], [N, C, d...], or any shape
/// with the classes on `options.axis`; a 1-d [C] is one sample) and int32 /
/// int64 labels shaped like the logits without the class axis. Numerically
/// stable for any finite logits (log-sum-exp about the row maximum); the
/// backward is the fused scale * (softmax - target). Reduction mean divides
/// by the number of samples; none returns the labels' shape, mean and sum a
/// 0-d tensor. A label outside [0, C) throws ValueError naming it, its index
/// and C, and nothing is recorded (the kernel checks the labels as it reads
/// them); bad shapes throw ShapeError, non-integer labels DTypeError.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, const CrossEntropyOptions& options = {});

/// Negative log-likelihood: -log_probs[sample, label] for log_probs [N, C]
/// (or [N, C, d...], classes on axis 1) and int32 / int64 labels [N] (or
/// [N, d...]), reduced like cross_entropy. Errors as cross_entropy.
Tensor nll_loss(const Tensor& log_probs, const Tensor& labels, const LossOptions& options = {});

/// (pred - target)^2 elementwise, then reduced (mean over all elements by
/// default; none keeps the shape). pred and target must have the same shape;
/// differing floating dtypes are promoted. Both get gradients.
Tensor mse_loss(const Tensor& pred, const Tensor& target, const LossOptions& options = {});

/// |pred - target| elementwise, then reduced; the gradient at pred == target
/// is 0. Shapes and dtypes as mse_loss.
Tensor l1_loss(const Tensor& pred, const Tensor& target, const LossOptions& options = {});

/// Binary cross-entropy of sigmoid(logits) against a target in [0, 1],
/// computed as max(x, 0) - x t + log1p(exp(-|x|)) so it neither overflows
/// nor loses precision for large |x|. Shapes and dtypes as mse_loss.
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        const LossOptions& options = {});

struct SmoothL1LossOptions {
  Reduction reduction = Reduction::mean;
  double beta = 1.0;  // >= 0; 0 is l1_loss (PyTorch's rule), < 0 a ValueError
};
/// 0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta, with d = pred - target.
Tensor smooth_l1_loss(const Tensor& pred, const Tensor& target, const SmoothL1LossOptions& options = {});

struct HuberLossOptions {
  Reduction reduction = Reduction::mean;
  double delta = 1.0;  // > 0, else ValueError
};
/// 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta), d = pred - target.
Tensor huber_loss(const Tensor& pred, const Tensor& target, const HuberLossOptions& options = {});

struct BinaryCrossEntropyOptions {
  Reduction reduction = Reduction::mean;
  Tensor weight = {};  // optional, broadcast to the input's shape
};
/// -weight (t log p + (1 - t) log(1 - p)) for probabilities p, each log
/// clamped at -100 as PyTorch. Under autocast on CUDA it is refused
/// (StateError) with PyTorch's advice: use binary_cross_entropy_with_logits.
Tensor binary_cross_entropy(const Tensor& probs, const Tensor& target, const BinaryCrossEntropyOptions& options = {});

struct PoissonNllLossOptions {
  Reduction reduction = Reduction::mean;
  bool log_input = true;  // input is log(rate): exp(x) - t x; else x - t log(x + eps)
  bool full = false;      // add Stirling's t log t - t + 0.5 log(2 pi t) where t > 1
  double eps = 1e-8;
};
Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, const PoissonNllLossOptions& options = {});

struct KlDivOptions {
  Reduction reduction = Reduction::mean;  // mean over all elements, as PyTorch's 'mean'
  bool batchmean = false;                 // sum / input.size(0) (PyTorch's 'batchmean'), over reduction
  bool log_target = false;                // target given as log-probabilities
};
/// target (log target - input) (0 where target == 0), input being
/// log-probabilities; with log_target, exp(target) (target - input).
Tensor kl_div(const Tensor& input, const Tensor& target, const KlDivOptions& options = {});

/// log(1 + exp(-y x)) for labels y of +-1.
Tensor soft_margin_loss(const Tensor& input, const Tensor& target, const LossOptions& options = {});

struct MarginLossOptions {
  Reduction reduction = Reduction::mean;
  double margin = 0.0;
};
/// max(0, -y (x1 - x2) + margin) for y of +-1; x1, x2 and y of one shape.
Tensor margin_ranking_loss(const Tensor& x1, const Tensor& x2, const Tensor& target,
                           const MarginLossOptions& options = {});
struct HingeEmbeddingLossOptions {
  Reduction reduction = Reduction::mean;
  double margin = 1.0;  // PyTorch's default
};
/// x where y == 1, max(0, margin - x) where y == -1.
Tensor hinge_embedding_loss(const Tensor& input, const Tensor& target, const HingeEmbeddingLossOptions& options = {});
/// 1 - cos(x1, x2) where y == 1, max(0, cos(x1, x2) - margin) where y == -1,
/// cos along the last dim of x1, x2 ([N, D] with y [N], or [D] with a 0-d y).
Tensor cosine_embedding_loss(const Tensor& x1, const Tensor& x2, const Tensor& target,
                             const MarginLossOptions& options = {});

struct MultiMarginLossOptions {
  Reduction reduction = Reduction::mean;
  int p = 1;  // 1 or 2, else ValueError
  double margin = 1.0;
  Tensor weight = {};  // optional [C]: class y's weight multiplies sample's terms
};
/// sum over i != y of w[y] max(0, margin - x[y] + x[i])^p / C, for input
/// [N, C] (or [C]) and int32 / int64 labels y [N] (or 0-d) in [0, C)
/// (ValueError naming the label otherwise).
Tensor multi_margin_loss(const Tensor& input, const Tensor& target, const MultiMarginLossOptions& options = {});

struct TripletMarginLossOptions {
  Reduction reduction = Reduction::mean;
  double margin = 1.0;
  double p = 2.0;  // the norm of the distances, > 0
  double eps = 1e-6;
  bool swap = false;  // the distance to the negative is the smaller of anchor's and positive's
};
/// max(d(a, p) - d(a, n) + margin, 0), d(x, y) = ||x - y + eps||_p along the
/// last dim of anchor, positive, negative ([N, D] or [D], one shape).
Tensor triplet_margin_loss(const Tensor& anchor, const Tensor& positive, const Tensor& negative,
                           const TripletMarginLossOptions& options = {});

}  // namespace mixgrad::F
