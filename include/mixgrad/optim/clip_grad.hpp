// mixgrad/optim/clip_grad.hpp — gradient clipping by total norm.
//
// Rescales a set of gradients together so that their joint norm does not
// exceed a bound; the direction of the combined gradient is kept.
//
//   gm.backward(loss);
//   mg::Tensor norm = mg::optim::clip_grad_norm(net.parameters(), 1.0);  // L2
//   mg::optim::clip_grad_norm(params, 0.5, INFINITY);                    // max-norm
//   opt.step();
//   double n = norm.item<double>();   // only if you need it: a synchronisation
//
// The norm and the clip factor are computed on the gradients' device and
// the norm is returned as a tensor there (as in PyTorch), so clipping never
// waits for the device; reading the norm on the host is the caller's choice.
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
/// gradients; the factor is computed on the device from the norm tensor).
/// Tensors without a gradient are skipped. A non-finite norm (inf or NaN
/// somewhere) is returned without touching the gradients. Returns the norm
/// before clipping as a 0-d float64 tensor on the gradients' device (a CPU
/// zero when no tensor has a gradient). Throws ValueError for max_norm < 0 or
/// non-finite, or for norm_type <= 0 or NaN; DTypeError / DeviceError /
/// ShapeError for gradients that are not floating, on several devices, or
/// broadcast views.
Tensor clip_grad_norm(const std::vector<Tensor>& tensors, double max_norm, double norm_type = 2.0);

}  // namespace mixgrad::optim
