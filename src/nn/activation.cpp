#include "mixgrad/nn/activation.hpp"

#include <sstream>

#include "mixgrad/error.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/nn.hpp"

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

PReLU::PReLU(int64_t num_parameters, double init) : num_parameters_(num_parameters) {
  if (num_parameters < 1)
    throw ValueError("PReLU: num_parameters must be >= 1, got " + std::to_string(num_parameters));
  weight_ = register_parameter("weight", full(Shape{num_parameters}, init));
}

Tensor PReLU::forward(const Tensor& x) { return F::prelu(x, weight_); }

std::string PReLU::describe() const { return "PReLU(num_parameters=" + std::to_string(num_parameters_) + ")"; }

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
