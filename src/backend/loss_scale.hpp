// Device-side pieces of dynamic loss scaling (GradScaler): the scaled
// upstream gradient, formed from the scale tensor where it lives, and the
// scale's update (PyTorch's `_amp_update_scale_`). Both read and write
// one-element tensors on the device, so GradScaler::backward and update()
// never read the scale on the host.
//
//   backend::scale_copy(dy, out, scale);       // out = dy * scale
//   backend::scale_copy(Tensor(), out, scale); // out = scale, everywhere
//   backend::update_scale(scale, inv_scale, tracker, found_inf, opts);
#pragma once

#include <cstdint>

#include "backend/dispatch.hpp"
#include "backend/multi_tensor.hpp"

namespace mixgrad::backend {

/// The settings of one scale update; the bounds are GradScaler's validated
/// min / max scale (or the absolute limits), growth_interval > 0.
struct ScaleUpdateOptions {
  double growth_factor = 2.0, backoff_factor = 0.5, min_scale = 0.0, max_scale = 0.0;
  int64_t growth_interval = 1;
};

/// The kernel of scale_copy below, which checks scale first.
MIXGRAD_STUB(scale_copy_kernel, 1, void(const Tensor& src, const Tensor& dst, const Tensor& scale));  // on dst's device

/// dst = src * scale elementwise (src of dst's shape, any dtype), the
/// product formed in dst's arithmetic type with the scale rounded once to
/// it; an undefined src fills dst with the scale rounded to dst's dtype. scale: a one-element float32 / float64
/// tensor on dst's device.
inline void scale_copy(const Tensor& src, const Tensor& dst, const Tensor& scale) {
  detail::check_scalar_arg("scale_copy", "scale", scale, dst.device(), true);
  scale_copy_kernel(src, dst, scale);
}

/// One step of the dynamic scale (kernels::ScaleUpdate): scale and inv_scale
/// are one-element float64 tensors, growth_tracker a one-element int64
/// tensor, found_inf a one-element float32 flag (nonzero: the step
/// overflowed) or undefined for a clean step; all on one device.
MIXGRAD_STUB(update_scale, 0,
             void(const Tensor& scale, const Tensor& inv_scale, const Tensor& growth_tracker, const Tensor& found_inf,
                  const ScaleUpdateOptions& o));  // on scale's device

}  // namespace mixgrad::backend
