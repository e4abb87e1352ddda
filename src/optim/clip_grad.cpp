// clip_grad_norm: two fused multi-tensor passes at most (the norm, then the
// in-place rescale), whatever the number of tensors. The norm stays on the
// device and the clip factor is formed there, so clipping needs no host read.
#include "mixgrad/optim/clip_grad.hpp"

#include <cmath>
#include <sstream>

#include "amp/grad_list.hpp"
#include "backend/multi_tensor.hpp"

namespace mixgrad::optim {

namespace {
std::string num(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}
}  // namespace

Tensor clip_grad_norm(const std::vector<Tensor>& tensors, double max_norm, double norm_type) {
  if (!std::isfinite(max_norm) || max_norm < 0.0)
    throw ValueError("clip_grad_norm: max_norm must be finite and >= 0, got " + num(max_norm));
  if (std::isnan(norm_type) || norm_type <= 0.0)
    throw ValueError("clip_grad_norm: norm_type must be > 0 (or INFINITY), got " + num(norm_type));
  const amp::detail::GradList list = amp::detail::collect_grads("clip_grad_norm", tensors);
  Tensor norm = backend::grad_norm(list.grads, norm_type);
  backend::clip_by_norm(list.grads, norm, max_norm);  // a no-op unless finite and above max_norm
  // Possibly written in place: bumped either way, as whether it was is
  // known only on the device.
  for (const Tensor& g : list.grads) g.bump_version();
  return norm;
}

}  // namespace mixgrad::optim
