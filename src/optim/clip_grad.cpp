// clip_grad_norm: two fused multi-tensor passes at most (the norm, then the
// in-place rescale), whatever the number of tensors.
#include "mixgrad/optim/clip_grad.hpp"

#include <cmath>
#include <sstream>

#include "amp/grad_list.hpp"
#include "backend/amp.hpp"

namespace mixgrad::optim {

namespace {
std::string num(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}
}  // namespace

double clip_grad_norm(const std::vector<Tensor>& tensors, double max_norm, double norm_type) {
  if (!std::isfinite(max_norm) || max_norm < 0.0)
    throw ValueError("clip_grad_norm: max_norm must be finite and >= 0, got " + num(max_norm));
  if (std::isnan(norm_type) || norm_type <= 0.0)
    throw ValueError("clip_grad_norm: norm_type must be > 0 (or INFINITY), got " + num(norm_type));
  const amp::detail::GradList list = amp::detail::collect_grads("clip_grad_norm", tensors);
  const double norm = backend::grad_norm(list.grads, norm_type);
  // Leave non-finite grads alone: scaling by max_norm / inf would zero the
  // finite ones and hide the overflow from whoever checks next.
  if (std::isfinite(norm) && norm > max_norm) {
    backend::scale_and_check(list.grads, max_norm / norm);
    for (const Tensor& g : list.grads) g.bump_version();  // written in place
  }
  return norm;
}

}  // namespace mixgrad::optim
