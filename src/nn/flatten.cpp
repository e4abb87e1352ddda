#include "mixgrad/nn/flatten.hpp"

#include "mixgrad/ops/shape_ops.hpp"

namespace mixgrad::nn {

Tensor Flatten::forward(const Tensor& x) { return F::flatten(x, start_, end_); }

std::string Flatten::describe() const {
  return "Flatten(start_dim=" + std::to_string(start_) + ", end_dim=" + std::to_string(end_) + ")";
}

}  // namespace mixgrad::nn
