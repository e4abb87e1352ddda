// Backend seam of the losses: fused forward and backward kernels per device.
//
// Every tensor handed to these functions is contiguous; the ops layer
// (ops/loss.cpp) validates shapes and dtypes first. Class losses see their
// input as [outer, classes, inner] (the class axis in the middle) and their
// labels as [outer * inner]. Reductions over samples are deterministic: the
// result does not depend on the number of threads.
//
//   backend::cross_entropy_forward({.logits = x, .labels = y, .layout = lay, ...}, out, stats);
#pragma once

#include <cstdint>
#include <optional>

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
  Tensor labels;  // int32 / int64, contiguous, [outer * inner] elements, in range
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

namespace cpu {
std::optional<int64_t> find_label_out_of_range(const Tensor& labels, int64_t classes);
void cross_entropy_forward(const ClassLossArgs& a, const Tensor& out, const Tensor& stats);
void cross_entropy_backward(const ClassLossArgs& a, const Tensor& stats, const Tensor& grad_out, const Tensor& grad_input);
void nll_loss_forward(const ClassLossArgs& a, const Tensor& out);
void nll_loss_backward(const ClassLossArgs& a, const Tensor& grad_out, const Tensor& grad_input);
void pointwise_loss_forward(const PointwiseLossArgs& a, const Tensor& out);
void pointwise_loss_backward(const PointwiseLossArgs& a, const Tensor& grad_out, const LossGrads& grads);
}  // namespace cpu
namespace cuda {
std::optional<int64_t> find_label_out_of_range(const Tensor& labels, int64_t classes);
void cross_entropy_forward(const ClassLossArgs& a, const Tensor& out, const Tensor& stats);
void cross_entropy_backward(const ClassLossArgs& a, const Tensor& stats, const Tensor& grad_out, const Tensor& grad_input);
void nll_loss_forward(const ClassLossArgs& a, const Tensor& out);
void nll_loss_backward(const ClassLossArgs& a, const Tensor& grad_out, const Tensor& grad_input);
void pointwise_loss_forward(const PointwiseLossArgs& a, const Tensor& out);
void pointwise_loss_backward(const PointwiseLossArgs& a, const Tensor& grad_out, const LossGrads& grads);
}  // namespace cuda

/// The first label outside [0, classes), if any (labels: int32 / int64).
inline std::optional<int64_t> find_label_out_of_range(const Tensor& labels, int64_t classes) {
  MIXGRAD_DISPATCH(labels.device(), find_label_out_of_range, (labels, classes));
}

/// out: the loss in the input's dtype, 0-d for mean / sum, [samples] for none.
/// stats: [samples, 2] in the accumulation dtype (float32, float64 for float64
/// input) receives each sample's (max, log sum exp(x - max)) for the backward.
inline void cross_entropy_forward(const ClassLossArgs& a, const Tensor& out, const Tensor& stats) {
  MIXGRAD_DISPATCH(out.device(), cross_entropy_forward, (a, out, stats));
}

/// grad_input = scale * (softmax - smoothed one-hot), scale from grad_out
/// (0-d for mean / sum, [samples] for none) and the reduction.
inline void cross_entropy_backward(const ClassLossArgs& a, const Tensor& stats, const Tensor& grad_out,
                                   const Tensor& grad_input) {
  MIXGRAD_DISPATCH(grad_input.device(), cross_entropy_backward, (a, stats, grad_out, grad_input));
}

/// out = -input[label], reduced.
inline void nll_loss_forward(const ClassLossArgs& a, const Tensor& out) {
  MIXGRAD_DISPATCH(out.device(), nll_loss_forward, (a, out));
}

/// grad_input = -scale at each label, 0 elsewhere (a.input is not read).
inline void nll_loss_backward(const ClassLossArgs& a, const Tensor& grad_out, const Tensor& grad_input) {
  MIXGRAD_DISPATCH(grad_input.device(), nll_loss_backward, (a, grad_out, grad_input));
}

/// out: the loss in pred's dtype, 0-d for mean / sum, pred's shape for none.
inline void pointwise_loss_forward(const PointwiseLossArgs& a, const Tensor& out) {
  MIXGRAD_DISPATCH(out.device(), pointwise_loss_forward, (a, out));
}

/// Gradients for pred and / or target (whichever of grads is defined).
inline void pointwise_loss_backward(const PointwiseLossArgs& a, const Tensor& grad_out, const LossGrads& grads) {
  MIXGRAD_DISPATCH(grad_out.device(), pointwise_loss_backward, (a, grad_out, grads));
}

}  // namespace mixgrad::backend
