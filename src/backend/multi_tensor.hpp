// Multi-tensor kernels: each call is one fused pass over a whole list of
// gradients, however many tensors it holds. GradScaler::unscale uses the
// check-and-unscale pass (GradScaler::step the check alone, when the
// optimizer unscales in its update), clip_grad_norm the norm and the clip. Nothing here
// returns a value computed from tensor data to the host: results (the
// found-inf flag, the norm) are written into one-element tensors on the
// gradients' device, and factors are read from such tensors, so a step on a
// device never waits for it.
//
//   backend::non_finite_check_and_unscale(grads, found_inf, inv_scale);  // in place
//   Tensor norm = backend::grad_norm(grads, 2.0);                         // 0-d float64
//   backend::clip_by_norm(grads, norm, max_norm);                         // in place
//
// The tensors must be floating, on one device, and must not overlap
// themselves (no zero strides); callers validate (amp/grad_list.hpp).
#pragma once

#include <span>
#include <string>

#include "backend/dispatch.hpp"
#include "mixgrad/error.hpp"

namespace mixgrad::backend {

namespace detail {
// A one-element tensor of an allowed dtype on `device`; DTypeError /
// ShapeError / DeviceError naming `op` and `what` otherwise.
inline void check_scalar_arg(const char* op, const char* what, const Tensor& t, Device device, bool float64_ok) {
  if (!t.defined()) throw StateError(std::string(op) + ": " + what + " is undefined");
  if (t.numel() != 1)
    throw ShapeError(std::string(op) + ": " + what + " must hold one element, got shape " + to_string(t.shape()));
  if (t.dtype() != DType::float32 && !(float64_ok && t.dtype() == DType::float64))
    throw DTypeError(std::string(op) + ": " + what + " must be float32" + (float64_ok ? " or float64" : "") +
                     ", got " + std::string(to_string(t.dtype())));
  if (t.device() != device)
    throw DeviceError(std::string(op) + ": " + what + " is on " + to_string(t.device()) + " but the tensors are on " +
                      to_string(device));
}
}  // namespace detail

/// The kernels of the functions below, which check their arguments first
/// (found_inf, inv_scale, norm, out: on the tensors' device).
using NonFiniteCheckFn = void(std::span<const Tensor> tensors, const Tensor& found_inf, const Tensor& inv_scale);
MIXGRAD_STUB(non_finite_check_and_unscale_kernel, 1, NonFiniteCheckFn);  // on found_inf's device
MIXGRAD_STUB(non_finite_check_kernel, 1, NonFiniteCheckFn);              // on found_inf's device
MIXGRAD_STUB(grad_norm_kernel, 2,
             void(std::span<const Tensor> tensors, double norm_type, const Tensor& out));  // on out's device
MIXGRAD_STUB(clip_by_norm_kernel, 1,
             void(std::span<const Tensor> tensors, const Tensor& norm, double max_norm));  // on norm's device

/// PyTorch's `_amp_foreach_non_finite_check_and_unscale_`: multiplies every
/// element of every tensor by inv_scale's value in place (rounded once to
/// float, or kept in double for float64 tensors) and sets found_inf (a
/// one-element float32 tensor on the tensors' device) to 1 when any stored
/// result is inf or NaN; it never resets it to 0. inv_scale is a one-element
/// float32 or float64 tensor there (float64 keeps 1 / scale exact for float64
/// gradients). An empty list does nothing. A factor that is not finite in
/// the type it would be applied in (0 * inf would report a false overflow)
/// throws ValueError on the CPU, touching nothing; on CUDA, where the factor
/// is only known on the device, it sets found_inf and touches nothing else
/// (the step is skipped, as for an overflow).
inline void non_finite_check_and_unscale(std::span<const Tensor> tensors, const Tensor& found_inf,
                                         const Tensor& inv_scale) {
  if (tensors.empty()) return;
  const Device device = tensors.front().device();
  detail::check_scalar_arg("non_finite_check_and_unscale", "found_inf", found_inf, device, false);
  detail::check_scalar_arg("non_finite_check_and_unscale", "inv_scale", inv_scale, device, true);
  non_finite_check_and_unscale_kernel(tensors, found_inf, inv_scale);
}

/// The check of non_finite_check_and_unscale without the write: sets
/// found_inf to 1 when any g * inv_scale, computed in g's arithmetic type
/// (float for 16-bit tensors, not rounded back to them), is inf or NaN; the
/// tensors are only read. For optimizers that unscale inside their update
/// kernel (Optimizer::step(GradScaler&)), so the gradients are read once
/// here and once by the update, and never written.
inline void non_finite_check(std::span<const Tensor> tensors, const Tensor& found_inf, const Tensor& inv_scale) {
  if (tensors.empty()) return;
  const Device device = tensors.front().device();
  detail::check_scalar_arg("non_finite_check", "found_inf", found_inf, device, false);
  detail::check_scalar_arg("non_finite_check", "inv_scale", inv_scale, device, true);
  non_finite_check_kernel(tensors, found_inf, inv_scale);
}

/// The p-norm (`norm_type` > 0, or +inf for the largest |x|) of all elements
/// of all tensors taken together, accumulated in double, as a 0-d float64
/// tensor on their device. NaN anywhere gives NaN; inf anywhere gives inf.
/// An empty list has norm 0 (a CPU tensor).
inline Tensor grad_norm(std::span<const Tensor> tensors, double norm_type) {
  const Device device = tensors.empty() ? Device::cpu() : tensors.front().device();
  Tensor out = empty(Shape{}, DType::float64, device);
  if (tensors.empty()) {
    *out.data<double>() = 0.0;
    return out;
  }
  grad_norm_kernel(tensors, norm_type, out);
  return out;
}

/// Multiplies every tensor in place by max_norm / norm (computed in double
/// on the device, applied in float, or in double for float64 tensors) when
/// norm (a one-element float64 tensor on their device, from grad_norm) is
/// finite and above max_norm (>= 0); otherwise leaves them alone.
inline void clip_by_norm(std::span<const Tensor> tensors, const Tensor& norm, double max_norm) {
  if (tensors.empty()) return;
  const Device device = tensors.front().device();
  detail::check_scalar_arg("clip_by_norm", "norm", norm, device, true);
  clip_by_norm_kernel(tensors, norm, max_norm);
}

}  // namespace mixgrad::backend
