// mixgrad/ops/loss.hpp — losses. Computed in float32 (or float64) whatever
// the input dtype.
//
//   auto loss = F::cross_entropy(logits, labels);          // mean over batch
//   auto l = F::cross_entropy(logits, labels, {.label_smoothing = 0.1});
#pragma once

#include "mixgrad/ops/options.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::F {

struct CrossEntropyOptions {
  Reduction reduction = Reduction::mean;
  double label_smoothing = 0.0;
  int axis = 1;  // the class axis of the logits
};
/// logits [N, C] (or [N, C, ...]); labels int32/int64 of the other dims.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, const CrossEntropyOptions& options = {});
/// log_probs [N, C]; labels int32/int64 [N].
Tensor nll_loss(const Tensor& log_probs, const Tensor& labels, Reduction reduction = Reduction::mean);
Tensor mse_loss(const Tensor& pred, const Tensor& target, Reduction reduction = Reduction::mean);
Tensor l1_loss(const Tensor& pred, const Tensor& target, Reduction reduction = Reduction::mean);
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction reduction = Reduction::mean);

}  // namespace mixgrad::F
