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

}  // namespace mixgrad::F
