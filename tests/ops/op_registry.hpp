// The one registration list every op is tested from, two ways (see
// test_op_registry.cpp): its gradient against central finite differences in
// float64, and its float16 / bfloat16 result against float32.
//
// Each op family contributes a function returning its cases; all_op_cases()
// joins them. A case says how to build inputs and how to run the op:
//
//   {.name = "mul_broadcast",
//    .inputs = {{3, 4}, {4}},
//    .run = [](const Inputs& x) { return mg::F::mul(x[0], x[1]); }}
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "mixgrad/mixgrad.hpp"

namespace optest {

namespace mg = mixgrad;
using Inputs = std::vector<mg::Tensor>;

struct InputSpec {
  mg::Shape shape;
  /// Builds the input in `dtype` (floating inputs) from a seed; empty means
  /// uniform in [low, high). Integer inputs (labels) ignore `dtype`.
  std::function<mg::Tensor(mg::DType dtype)> make = nullptr;
  double low = -1.0;
  double high = 1.0;
  /// Checked by finite differences (floating inputs only).
  bool differentiable = true;
  InputSpec(mg::Shape s) : shape(s) {}  // NOLINT(google-explicit-constructor)
  InputSpec(std::initializer_list<int64_t> s) : shape(s) {}
  InputSpec(mg::Shape s, double lo, double hi) : shape(s), low(lo), high(hi) {}
  InputSpec(mg::Shape s, std::function<mg::Tensor(mg::DType)> m, bool diff = false)
      : shape(s), make(std::move(m)), differentiable(diff) {}
};

struct OpCase {
  std::string name;
  std::vector<InputSpec> inputs;
  std::function<mg::Tensor(const Inputs&)> run;
  /// Multiplies the per-dtype tolerance of the low-precision check (ops
  /// with long reductions, e.g. a conv over many channels, need more).
  double lowp_tolerance = 1.0;
  /// False for ops whose low-precision run is not meaningful (integer output).
  bool check_low_precision = true;
  /// False for ops without a gradient (comparisons, argmax).
  bool check_gradient = true;
  /// Finite-difference step and tolerance (float64).
  double eps = 1e-6;
  double grad_tolerance = 1e-5;
};

// One function per op family, each in its own cases_*.cpp.
std::vector<OpCase> elementwise_cases();
std::vector<OpCase> reduction_cases();
std::vector<OpCase> linalg_cases();
std::vector<OpCase> nn_cases();
std::vector<OpCase> loss_cases();
std::vector<OpCase> shape_cases();

inline std::vector<OpCase> all_op_cases() {
  std::vector<OpCase> all;
  for (auto family : {elementwise_cases, reduction_cases, linalg_cases, nn_cases, loss_cases, shape_cases}) {
    auto cases = family();
    all.insert(all.end(), cases.begin(), cases.end());
  }
  return all;
}

}  // namespace optest
