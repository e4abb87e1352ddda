// Helpers of the focused op tests (test_elementwise.cpp, test_reduction.cpp):
// short tensor literals, values compared with NaN and inf taken as values,
// the message of an expected exception, and the gradients of a function.
//
//   check_close(vals(F::max(t({1, kNaN}, {2}))), {kNaN});
//   const auto g = grads({x}, [](const auto& in) { return F::relu(in[0]); });
#pragma once

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "mixgrad/mixgrad.hpp"

namespace ops_test {

using Vec = std::vector<double>;

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

inline mixgrad::Tensor t(const Vec& v, const mixgrad::Shape& s, mixgrad::DType dt = mixgrad::DType::float32) {
  return mixgrad::tensor(v, s, dt);
}
inline Vec vals(const mixgrad::Tensor& x) { return x.to_vector<double>(); }

// Element-wise closeness (NaN matches NaN, inf matches the same inf).
inline void check_close(const Vec& got, const Vec& want, double tol = 1e-6) {
  BOOST_TEST_REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      BOOST_TEST(std::isnan(got[i]), "element " << i << ": " << got[i] << ", want NaN");
    } else if (std::isinf(want[i])) {
      BOOST_TEST(got[i] == want[i], "element " << i << ": " << got[i] << ", want " << want[i]);
    } else {
      BOOST_TEST(std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i])),
                 "element " << i << ": " << got[i] << ", want " << want[i]);
    }
  }
}

// The message of the exception of type E that fn throws ("" and a failed
// check when it throws none).
template <class E>
std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  BOOST_ERROR("expected an exception");
  return "";
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Gradients of sum(fn(inputs) * dy) (dy = ones when undefined) w.r.t. the
// inputs; earlier gradients of the inputs are dropped first (backward
// accumulates).
inline std::vector<mixgrad::Tensor> grads(const std::vector<mixgrad::Tensor>& inputs,
                                          const std::function<mixgrad::Tensor(const std::vector<mixgrad::Tensor>&)>& fn,
                                          const mixgrad::Tensor& dy = mixgrad::Tensor()) {
  for (const auto& x : inputs) x.set_grad(mixgrad::Tensor());
  mixgrad::autodiff::GradManager gm;
  gm.attach(inputs);
  {
    auto rec = gm.record();
    gm.backward(fn(inputs), dy);
  }
  std::vector<mixgrad::Tensor> out;
  for (const auto& x : inputs) out.push_back(x.grad());
  return out;
}

}  // namespace ops_test
