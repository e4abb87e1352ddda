#include "mixgrad/nn/dropout.hpp"

#include <sstream>

#include "mixgrad/ops/nn.hpp"

namespace mixgrad::nn {

Dropout::Dropout(double p) : p_(p) {
  if (!(p >= 0 && p < 1)) throw ValueError("Dropout: p must be in [0, 1), got " + std::to_string(p));
}

Tensor Dropout::forward(const Tensor& x) { return F::dropout(x, p_, is_training()); }

std::string Dropout::describe() const {
  std::ostringstream s;
  s << "Dropout(p=" << p_ << ")";
  return s.str();
}

}  // namespace mixgrad::nn
