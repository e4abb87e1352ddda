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

/// A scaler state dict's values as doubles.
inline std::map<std::string, double> to_map(const mg::StateDict& d) {
  std::map<std::string, double> m;
  for (const auto& [k, t] : d) m[k] = t.item<double>();
  return m;
}

/// A state dict of 0-d float64 tensors: the form older checkpoints hold.
inline mg::StateDict from_map(const std::map<std::string, double>& m) {
  mg::StateDict d;
  for (const auto& [k, v] : m) d.insert(k, mg::scalar(v, mg::DType::float64));
  return d;
}

/// Exact equality of two state dicts (same keys, dtypes, bit-equal values).
inline bool same_state(const mg::StateDict& a, const mg::StateDict& b) {
  if (a.keys() != b.keys()) return false;
  for (const auto& [k, t] : a)
    if (t.dtype() != b.at(k).dtype()) return false;
  return to_map(a) == to_map(b);
}
inline bool same_state(const mg::StateDict& a, const std::map<std::string, double>& b) { return to_map(a) == b; }

}  // namespace amptest
