// Small helpers shared by the Boost.Test suites: reading a tensor's values
// and checking what an exception says.
//
//   #include "../common/test_util.hpp"
//   using test_util::values;
//   BOOST_TEST(values(t) == std::vector<double>({1, 2}), tt::per_element());
//   test_util::check_error<mg::ShapeError>([&] { F::reshape(x, {7}); }, {"reshape", "float32[2, 3]"});
#pragma once

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <string>
#include <vector>

#include "mixgrad/mixgrad.hpp"

namespace test_util {

/// Every element of `t`, converted to double, in row-major order.
inline std::vector<double> values(const mixgrad::Tensor& t) { return t.to_vector<double>(); }

/// True when a and b hold the same floats bit for bit (gradients of two runs).
inline bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0)
      return false;
  return true;
}

/// Standard normal float32 values of `shape`, the same for the same seed
/// (reseeds the global generator).
inline mixgrad::Tensor randn(const mixgrad::Shape& shape, uint64_t seed) {
  mixgrad::manual_seed(seed);
  return mixgrad::normal(shape, 0.0, 1.0, mixgrad::DType::float32);
}

/// True when the error's message contains every one of `parts`.
inline bool message_has(const mixgrad::Error& e, std::initializer_list<const char*> parts) {
  const std::string what = e.what();
  for (const char* p : parts)
    if (what.find(p) == std::string::npos) return false;
  return true;
}

/// Runs f, which must throw exactly E (or a subclass) with every needle in
/// its message; reports a test error otherwise.
template <class E, class F>
void check_error(F&& f, const std::vector<std::string>& needles) {
  try {
    f();
    BOOST_ERROR("no exception; expected one mentioning " + needles.front());
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const std::string& n : needles) BOOST_TEST(msg.find(n) != std::string::npos, "'" << n << "' in: " << msg);
  } catch (const std::exception& e) {
    BOOST_ERROR(std::string("wrong exception type: ") + e.what());
  }
}

/// Every element of `got` within tol * (1 + |want|) of `want`'s, same shape.
inline void check_close(const mixgrad::Tensor& got, const mixgrad::Tensor& want, double tol = 1e-5) {
  BOOST_TEST_REQUIRE(mixgrad::to_string(got.shape()) == mixgrad::to_string(want.shape()));
  const std::vector<double> g = values(got), w = values(want);
  for (size_t i = 0; i < g.size(); ++i)
    BOOST_TEST(std::abs(g[i] - w[i]) <= tol * (1 + std::abs(w[i])), "element " << i << ": " << g[i] << " vs " << w[i]);
}

/// Central finite differences of loss() (a double) over every element of
/// the float64 host tensor `p`, against the analytic gradient `grad`. `p` is
/// perturbed in place and put back.
template <class Loss>
void check_finite_differences(const mixgrad::Tensor& p, const mixgrad::Tensor& grad, Loss&& loss,
                              double tol = 1e-7, double eps = 1e-6) {
  BOOST_TEST_REQUIRE(grad.defined(), "no gradient");
  const std::vector<double> g = values(grad);
  BOOST_TEST_REQUIRE(g.size() == static_cast<size_t>(p.numel()));
  mixgrad::Tensor q = p;
  double* d = q.data<double>();
  for (int64_t k = 0; k < p.numel(); ++k) {
    const double keep = d[k];
    d[k] = keep + eps;
    const double up = loss();
    d[k] = keep - eps;
    const double down = loss();
    d[k] = keep;
    const double fd = (up - down) / (2 * eps);
    BOOST_TEST(std::abs(g[k] - fd) <= tol * (1 + std::abs(fd)), "at " << k << ": " << g[k] << " vs " << fd);
  }
}

}  // namespace test_util
