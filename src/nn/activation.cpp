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

std::string LeakyReLU::describe() const {
  std::ostringstream s;
  s << "LeakyReLU(negative_slope=" << slope_ << ")";
  return s.str();
}

}  // namespace mixgrad::nn
