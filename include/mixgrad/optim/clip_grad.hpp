// mixgrad/optim/clip_grad.hpp — gradient clipping by total norm.
//
// Rescales a set of gradients together so that their joint norm does not
// exceed a bound; the direction of the combined gradient is kept.
//
//   gm.backward(loss);
//   double norm = mg::optim::clip_grad_norm(net.parameters(), 1.0);  // L2
//   mg::optim::clip_grad_norm(params, 0.5, INFINITY);                // max-norm
//   opt.step();
//
// With a GradScaler, clip after unscale() (the norm of scaled gradients is
// the scale times too large): unscale, clip, update, step.
#pragma once

#include <vector>

#include "mixgrad/tensor.hpp"

namespace mixgrad::optim {

/// Computes the `norm_type`-norm of the gradients of all `tensors` taken as
/// one vector (one fused pass over all of them, accumulated in double;
/// norm_type > 0, or INFINITY for the largest |g|) and, when it exceeds
/// `max_norm`, multiplies every gradient in place by max_norm / norm (the
/// factor computed in double, applied in float, or in double for float64
/// gradients). Tensors without a gradient are skipped. A non-finite norm
/// (inf or NaN somewhere) is returned without touching the gradients.
/// Returns the norm before clipping. Throws ValueError for max_norm < 0 or
/// non-finite, or for norm_type <= 0 or NaN; DTypeError / DeviceError /
/// ShapeError for gradients that are not floating, on several devices, or
/// broadcast views.
double clip_grad_norm(const std::vector<Tensor>& tensors, double max_norm, double norm_type = 2.0);

}  // namespace mixgrad::optim
