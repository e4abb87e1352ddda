#include "mixgrad/nn/activation.hpp"

#include <sstream>

#include "mixgrad/ops/elementwise.hpp"

namespace mixgrad::nn {

Tensor ReLU::forward(const Tensor& x) { return F::relu(x); }
Tensor LeakyReLU::forward(const Tensor& x) { return F::leaky_relu(x, slope_); }
Tensor GELU::forward(const Tensor& x) { return F::gelu(x); }
Tensor SiLU::forward(const Tensor& x) { return F::silu(x); }
Tensor Sigmoid::forward(const Tensor& x) { return F::sigmoid(x); }
Tensor Tanh::forward(const Tensor& x) { return F::tanh(x); }
Tensor Softplus::forward(const Tensor& x) { return F::softplus(x, beta_, threshold_); }
Tensor Hardswish::forward(const Tensor& x) { return F::hardswish(x); }
Tensor Mish::forward(const Tensor& x) { return F::mish(x); }

std::string LeakyReLU::describe() const {
  std::ostringstream s;
  s << "LeakyReLU(negative_slope=" << slope_ << ")";
  return s.str();
}

std::string Softplus::describe() const {
  std::ostringstream s;
  s << "Softplus(beta=" << beta_ << ", threshold=" << threshold_ << ")";
  return s.str();
}

}  // namespace mixgrad::nn
