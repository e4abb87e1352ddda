// Drives every registered op case through the two checks.
#define BOOST_TEST_MODULE mixgrad ops
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <sstream>

#include "op_registry.hpp"

namespace {

using namespace optest;

// Inputs of one case in `dtype`, reproducible per case and input.
Inputs make_inputs(const OpCase& c, mg::DType dtype, uint64_t seed) {
  Inputs xs;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    mg::manual_seed(seed * 131 + i);
    const InputSpec& s = c.inputs[i];
    xs.push_back(s.make ? s.make(dtype) : mg::uniform(s.shape, s.low, s.high, dtype));
  }
  return xs;
}

uint64_t seed_of(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (char ch : name) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  return h;
}

// sum(y * w) with fixed weights w: every output element matters.
double weighted_sum(const mg::Tensor& y, const std::vector<double>& w) {
  const auto v = y.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * w[i];
  return s;
}

void check_gradient(const OpCase& c) {
  BOOST_TEST_CONTEXT("op case " << c.name) {
    Inputs xs = make_inputs(c, mg::DType::float64, seed_of(c.name));
    mg::autodiff::GradManager gm;
    std::vector<size_t> checked;
    for (size_t i = 0; i < xs.size(); ++i)
      if (c.inputs[i].differentiable && xs[i].dtype() == mg::DType::float64) {
        gm.attach(xs[i]);
        checked.push_back(i);
      }
    BOOST_TEST_REQUIRE(!checked.empty(), "case has no differentiable float64 input");
    mg::Tensor y;
    std::vector<double> w;
    {
      auto rec = gm.record();
      y = c.run(xs);
      BOOST_TEST_REQUIRE(y.dtype() == mg::DType::float64);
      mg::manual_seed(7);
      mg::Tensor wt = mg::uniform(y.shape(), 0.5, 1.5, mg::DType::float64);
      w = wt.to_vector<double>();
      gm.backward(y, wt);
    }
    for (size_t i : checked) {
      BOOST_TEST_CONTEXT("input " << i << " of shape " << xs[i].shape()) {
        mg::Tensor g = xs[i].grad();
        BOOST_TEST_REQUIRE(g.defined(), "no gradient reached the input");
        BOOST_TEST_REQUIRE(g.shape() == xs[i].shape());
        const auto analytic = g.to_vector<double>();
        double* data = xs[i].data<double>();
        for (int64_t k = 0; k < xs[i].numel(); ++k) {
          const double orig = data[k];
          data[k] = orig + c.eps;
          const double up = weighted_sum(c.run(xs), w);
          data[k] = orig - c.eps;
          const double down = weighted_sum(c.run(xs), w);
          data[k] = orig;
          const double numeric = (up - down) / (2 * c.eps);
          const double tol = c.grad_tolerance * (1.0 + std::abs(numeric));
          BOOST_TEST(std::abs(analytic[k] - numeric) <= tol,
                     "element " << k << ": analytic " << analytic[k] << " vs numeric " << numeric);
        }
      }
    }
  }
}

void check_low_precision(const OpCase& c, mg::DType low) {
  BOOST_TEST_CONTEXT("op case " << c.name << " in " << low) {
    // The same values in both runs: round the float32 inputs to `low` first,
    // so the comparison measures the op, not the rounding of its inputs.
    Inputs lowp = make_inputs(c, low, seed_of(c.name));
    Inputs ref;
    for (const auto& x : lowp) ref.push_back(mg::is_floating_point(x.dtype()) ? x.to(mg::DType::float32) : x);
    const mg::Tensor y = c.run(lowp);
    const mg::Tensor y_ref = c.run(ref);
    BOOST_TEST_REQUIRE(y.shape() == y_ref.shape());
    if (mg::is_floating_point(y_ref.dtype())) BOOST_TEST(y.dtype() == low, "output dtype " << y.dtype());
    const double tol = (low == mg::DType::bfloat16 ? 2e-2 : 3e-3) * c.lowp_tolerance;
    const auto a = y.to_vector<double>();
    const auto b = y_ref.to_vector<double>();
    double scale = 0;
    for (double v : b) scale = std::max(scale, std::abs(v));
    for (size_t k = 0; k < a.size(); ++k)
      BOOST_TEST(std::abs(a[k] - b[k]) <= tol * (std::abs(b[k]) + 0.1 * scale + 1e-3),
                 "element " << k << ": " << a[k] << " vs float32 " << b[k]);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(registry_is_not_empty) { BOOST_TEST(all_op_cases().size() > 0u); }

BOOST_AUTO_TEST_CASE(every_op_gradient_matches_finite_differences_in_float64) {
  for (const auto& c : all_op_cases())
    if (c.check_gradient) check_gradient(c);
}

BOOST_AUTO_TEST_CASE(every_op_in_bfloat16_matches_float32) {
  for (const auto& c : all_op_cases())
    if (c.check_low_precision) check_low_precision(c, mg::DType::bfloat16);
}

BOOST_AUTO_TEST_CASE(every_op_in_float16_matches_float32) {
  for (const auto& c : all_op_cases())
    if (c.check_low_precision) check_low_precision(c, mg::DType::float16);
}
