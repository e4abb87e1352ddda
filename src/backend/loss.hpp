// Backend seam of the losses: fused forward and backward kernels per device.
//
// Every tensor handed to these functions is contiguous; the ops layer
// (ops/loss.cpp) validates shapes and dtypes first. Class losses see their
// input as [outer, classes, inner] (the class axis in the middle) and their
// labels as [outer * inner]. Reductions over samples are deterministic: the
// result does not depend on the number of threads.
//
// The class losses check their labels where they read them, in the forward
// kernel, and report a label outside [0, classes) through a small status
// tensor on the loss's device instead of returning a host value:
//  - on the CPU the status is written when the kernel returns; the op reads
//    it and throws at once;
//  - a CUDA kernel writes it in stream order. Reading it in every forward
//    would stall the stream once per step, so the op hands the status to
//    the pending checks (backend/pending_checks.hpp), read at the next
//    synchronisation (an item(), a copy to the host) and thrown from there,
//    with a switch that reads it right after the kernel for debugging
//    (eager checks).
//
//   Tensor status = empty({2}, DType::int64, device);
//   backend::cross_entropy_forward({.input = x, .labels = y, .layout = lay}, out, stats, status);
//   // status = {-1, 0}, or {index, label} of the first bad label
#pragma once

#include <cstdint>

#include "backend/dispatch.hpp"

namespace mixgrad::backend {

/// How a loss kernel combines its per-sample values: the backend's own copy
/// of the public `Reduction`, which the ops translate.
enum class LossReduction : uint8_t { mean, sum, none };

/// A class-axis tensor viewed as [outer, classes, inner].
struct ClassLayout {
  int64_t outer = 1;
  int64_t classes = 1;
  int64_t inner = 1;
  int64_t samples() const { return outer * inner; }
};

/// Inputs of a class loss (cross-entropy or NLL).
struct ClassLossArgs {
  Tensor input;   // logits or log-probabilities, floating, contiguous
  Tensor labels;  // int32 / int64, contiguous, [outer * inner] elements; the forward checks their range
  ClassLayout layout;
  LossReduction reduction = LossReduction::mean;
  double label_smoothing = 0.0;  // cross-entropy only
};

/// The three pointwise losses between a prediction and a target of the same shape.
enum class PointwiseLoss : uint8_t { mse, l1, bce_with_logits };

struct PointwiseLossArgs {
  PointwiseLoss kind = PointwiseLoss::mse;
  Tensor pred;    // floating, contiguous
  Tensor target;  // same shape and dtype as pred, contiguous
  LossReduction reduction = LossReduction::mean;
};

/// Gradient outputs; an undefined tensor is not computed.
struct LossGrads {
  Tensor input;   // same shape and dtype as the loss's first input
  Tensor target;  // pointwise losses only
};

/// out: the loss in the input's dtype, 0-d for mean / sum, [samples] for none.
/// stats: [samples, 2] in the accumulation dtype (float32, float64 for float64
/// input) receives each sample's (max, log sum exp(x - max)) for the backward.
/// label_status: int64 [2] on out's device, always written: {-1, 0} when every
/// label is in [0, classes), else {index, label} of the first label (in
/// sample order) that is not, and then out and stats are unspecified.
MIXGRAD_STUB(cross_entropy_forward, 1,
             void(const ClassLossArgs& a, const Tensor& out, const Tensor& stats,
                  const Tensor& label_status));  // on out's device

/// grad_input = scale * (softmax - smoothed one-hot), scale from grad_out
/// (0-d for mean / sum, [samples] for none) and the reduction.
MIXGRAD_STUB(cross_entropy_backward, 3,
             void(const ClassLossArgs& a, const Tensor& stats, const Tensor& grad_out,
                  const Tensor& grad_input));  // on grad_input's device

/// out = -input[label], reduced; label_status as for cross_entropy_forward.
MIXGRAD_STUB(nll_loss_forward, 1,
             void(const ClassLossArgs& a, const Tensor& out, const Tensor& label_status));  // on out's device

/// grad_input = -scale at each label, 0 elsewhere (a.input is not read).
MIXGRAD_STUB(nll_loss_backward, 2,
             void(const ClassLossArgs& a, const Tensor& grad_out, const Tensor& grad_input));  // on grad_input's device

/// out: the loss in pred's dtype, 0-d for mean / sum, pred's shape for none.
MIXGRAD_STUB(pointwise_loss_forward, 1, void(const PointwiseLossArgs& a, const Tensor& out));  // on out's device

/// Gradients for pred and / or target (whichever of grads is defined).
MIXGRAD_STUB(pointwise_loss_backward, 1,
             void(const PointwiseLossArgs& a, const Tensor& grad_out, const LossGrads& grads));  // on grad_out's device

}  // namespace mixgrad::backend
