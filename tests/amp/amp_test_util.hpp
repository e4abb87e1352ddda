// Small helpers shared by the amp tests.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "mixgrad/mixgrad.hpp"

namespace amptest {

namespace mg = mixgrad;

/// A parameter of the grad's shape (zeros) whose .grad() holds `grad` in `dtype`.
inline mg::Tensor param_with_grad(const std::vector<double>& grad, mg::DType dtype) {
  const mg::Shape shape{static_cast<int64_t>(grad.size())};
  mg::Tensor p = mg::zeros(shape, dtype);
  p.set_grad(mg::tensor(grad, shape, dtype));
  return p;
}

/// Stands in for an optimizer: counts step() calls.
struct CountingOptimizer {
  int steps = 0;
  CountingOptimizer& step() {
    ++steps;
    return *this;
  }
};

/// Exact equality of two state dicts (same keys, bit-equal values).
inline bool same_state(const std::map<std::string, double>& a, const std::map<std::string, double>& b) {
  return a == b;
}

}  // namespace amptest
