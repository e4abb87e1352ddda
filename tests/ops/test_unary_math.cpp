// The math and activation unary ops (sin, cos, tan, log1p, expm1, erf,
// softplus, hardswish, mish) against independent references: the C++
// standard library in double, and the closed-form derivatives written out
// here. The op registry checks the same ops' gradients by finite differences
// and their 16-bit runs against float32; this file pins the values, the
// branches (softplus's threshold, hardswish's kinks, mish's linear tail) and
// the errors.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "mixgrad/mixgrad.hpp"

namespace {

namespace mg = mixgrad;
namespace F = mg::F;
using mg::DType;
using Vec = std::vector<double>;
using Fn = std::function<double(double)>;

mg::Tensor t(const Vec& v, DType dt = DType::float64) { return mg::tensor(v, {static_cast<int64_t>(v.size())}, dt); }
Vec vals(const mg::Tensor& x) { return x.to_vector<double>(); }

// got[i] against want(xs[i]), relative tolerance with an absolute floor.
void check_against(const Vec& got, const Vec& xs, const Fn& want, double tol, const std::string& what) {
  BOOST_TEST_REQUIRE(got.size() == xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    const double w = want(xs[i]);
    BOOST_TEST(std::abs(got[i] - w) <= tol * (std::abs(w) + 1e-30),
               what << " at x=" << xs[i] << ": " << got[i] << ", want " << w);
  }
}

// d sum(op(x)) / dx.
Vec grad_of(const std::function<mg::Tensor(const mg::Tensor&)>& op, const mg::Tensor& x) {
  x.set_grad(mg::Tensor());
  mg::autodiff::GradManager gm;
  gm.attach(x);
  {
    auto rec = gm.record();
    gm.backward(F::sum(op(x)));
  }
  return vals(x.grad());
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double softplus_ref(double x, double beta, double threshold) {
  return x * beta > threshold ? x : std::log1p(std::exp(x * beta)) / beta;
}
double mish_ref(double x) { return x * std::tanh(std::log1p(std::exp(x))); }
double mish_grad_ref(double x) {
  const double t = std::tanh(std::log1p(std::exp(x)));
  return t + x * sigmoid(x) * (1 - t * t);
}
double hardswish_ref(double x) { return x * std::min(std::max(x + 3, 0.0), 6.0) / 6; }

struct MathCase {
  const char* name;
  mg::Tensor (*op)(const mg::Tensor&);
  Fn value;
  Fn derivative;
  Vec xs;
};

std::vector<MathCase> math_cases() {
  return {
      {"sin", &F::sin, [](double x) { return std::sin(x); }, [](double x) { return std::cos(x); },
       {-3.0, -1.0, -1e-8, 0.3, 1.5707963267948966, 2.5, 10.0}},
      {"cos", &F::cos, [](double x) { return std::cos(x); }, [](double x) { return -std::sin(x); },
       {-3.0, -1.0, 0.0, 0.3, 1.0, 2.5, 10.0}},
      {"tan", &F::tan, [](double x) { return std::tan(x); },
       [](double x) { return 1 / (std::cos(x) * std::cos(x)); }, {-1.4, -0.5, 1e-9, 0.5, 1.2, 3.0}},
      {"log1p", &F::log1p, [](double x) { return std::log1p(x); }, [](double x) { return 1 / (1 + x); },
       {-0.9, -1e-12, 1e-10, 0.5, 3.0, 100.0}},
      {"expm1", &F::expm1, [](double x) { return std::expm1(x); }, [](double x) { return std::exp(x); },
       {-5.0, -1e-12, 1e-10, 0.5, 3.0}},
      {"erf", &F::erf, [](double x) { return std::erf(x); },
       [](double x) { return 2 / std::sqrt(3.14159265358979323846) * std::exp(-x * x); },
       {-3.0, -0.7, 0.0, 1e-9, 0.4, 1.5, 5.0}},
  };
}

}  // namespace

BOOST_AUTO_TEST_SUITE(unary_math)

// float64 runs the same functor as float32 in double, so it must agree with
// the standard library to rounding, including the small-x forms of log1p
// and expm1 (log(1 + 1e-10) computed naively is off in the 8th digit).
BOOST_AUTO_TEST_CASE(values_and_gradients_match_the_standard_library) {
  for (const auto& c : math_cases()) {
    BOOST_TEST_CONTEXT(c.name) {
      const auto x = t(c.xs);
      check_against(vals(c.op(x)), c.xs, c.value, 1e-14, "float64 value");
      check_against(grad_of(c.op, x), c.xs, c.derivative, 1e-13, "float64 gradient");
      const auto x32 = t(c.xs, DType::float32);
      const Vec xs32 = vals(x32);  // the float32-rounded points
      check_against(vals(c.op(x32)), xs32, c.value, 2e-6, "float32 value");
      check_against(grad_of(c.op, x32), xs32, c.derivative, 2e-6, "float32 gradient");
      BOOST_TEST(c.op(x32).dtype() == DType::float32);
    }
  }
}

BOOST_AUTO_TEST_CASE(special_values) {
  const double inf = std::numeric_limits<double>::infinity();
  BOOST_TEST(vals(F::log1p(t({-1.0})))[0] == -inf);
  BOOST_TEST(vals(F::expm1(t({-inf}, DType::float32)))[0] == -1.0);
  BOOST_TEST(vals(F::erf(t({inf, -inf}, DType::float32))) == Vec({1.0, -1.0}));
  BOOST_TEST(std::isnan(vals(F::sin(t({inf}, DType::float32)))[0]));
  BOOST_TEST(std::signbit(F::sin(t({-0.0}, DType::float32)).item<float>()));
}

BOOST_AUTO_TEST_CASE(softplus_follows_pytorch_threshold) {
  // Default beta 1, threshold 20: linear only strictly above 20.
  const Vec xs = {-30.0, -2.0, 0.0, 1.0, 19.0, 20.0, 20.5, 40.0};
  const auto x = t(xs);
  const Vec y = vals(F::softplus(x));
  check_against(y, xs, [](double v) { return softplus_ref(v, 1, 20); }, 1e-14, "softplus");
  BOOST_TEST(y[4] != 19.0);  // soft branch: 19 + 5.6e-9
  BOOST_TEST(y[6] == 20.5);  // exactly x past the threshold
  BOOST_TEST(y[7] == 40.0);
  check_against(grad_of([](const mg::Tensor& v) { return F::softplus(v); }, x), xs,
                [](double v) { return v > 20 ? 1.0 : sigmoid(v); }, 1e-14, "softplus gradient");

  // beta 2, threshold 3: the switch is at x = 1.5, with a jump of
  // log1p(e^-3) / 2 in the value and sigmoid(3) -> 1 in the gradient.
  const Vec xb = {-1.0, 1.4, 1.49, 1.51, 2.0};
  const auto b = t(xb);
  auto sp = [](const mg::Tensor& v) { return F::softplus(v, 2.0, 3.0); };
  check_against(vals(sp(b)), xb, [](double v) { return softplus_ref(v, 2, 3); }, 1e-14, "softplus beta 2");
  BOOST_TEST(vals(sp(b))[3] == 1.51);
  check_against(grad_of(sp, b), xb, [](double v) { return v * 2 > 3 ? 1.0 : sigmoid(2 * v); }, 1e-14,
                "softplus beta 2 gradient");

  // A negative beta gives the smooth minimum with 0, linear far below 0.
  const Vec xn = {-25.0, -1.0, 0.0, 2.0};
  check_against(vals(F::softplus(t(xn), -1.0)), xn, [](double v) { return softplus_ref(v, -1, 20); }, 1e-14,
                "softplus beta -1");

  // A threshold past float's exp range: the soft value stays finite, no NaN
  // in the gradient.
  const auto big = t({100.0, -50.0}, DType::float32);
  auto wide = [](const mg::Tensor& v) { return F::softplus(v, 1.0, 1e9); };
  const Vec y_wide = vals(wide(big));
  BOOST_TEST(y_wide[0] == 100.0);
  BOOST_TEST(y_wide[1] == std::exp(-50.0), boost::test_tools::tolerance(1e-5));
  const Vec g = grad_of(wide, big);
  BOOST_TEST(g[0] == 1.0);
  BOOST_TEST(g[1] == sigmoid(-50.0), boost::test_tools::tolerance(1e-5));
}

BOOST_AUTO_TEST_CASE(softplus_rejects_bad_parameters_and_dtypes) {
  const auto x = mg::zeros({2, 3});
  for (double beta : {0.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    try {
      (void)F::softplus(x, beta);
      BOOST_ERROR("softplus with beta " << beta << " did not throw");
    } catch (const mg::ValueError& e) {
      const std::string m = e.what();
      BOOST_TEST(m.find("softplus") != std::string::npos, m);
      BOOST_TEST(m.find("beta") != std::string::npos, m);
      BOOST_TEST(m.find("float32[2, 3]") != std::string::npos, m);
    }
  }
  BOOST_CHECK_THROW((void)F::softplus(x, 1.0, std::numeric_limits<double>::quiet_NaN()), mg::ValueError);
  BOOST_CHECK_THROW((void)F::softplus(mg::zeros({2}, DType::int32)), mg::DTypeError);
  for (auto op : {&F::sin, &F::cos, &F::tan, &F::log1p, &F::expm1, &F::erf, &F::hardswish, &F::mish}) {
    BOOST_CHECK_THROW((void)op(mg::zeros({2}, DType::int64)), mg::DTypeError);
    BOOST_CHECK_THROW((void)op(mg::Tensor()), mg::StateError);
  }
}

// hardswish: the formula on each piece, and PyTorch's one-sided gradient at
// the kinks (the middle formula at exactly -3 and 3).
BOOST_AUTO_TEST_CASE(hardswish_pieces_and_kinks) {
  const Vec xs = {-4.0, -3.0, -1.5, 0.0, 1.0, 3.0, 4.5};
  for (DType dt : {DType::float64, DType::float32, DType::bfloat16}) {
    BOOST_TEST_CONTEXT(dt) {
      const double tol = dt == DType::bfloat16 ? 4e-3 : 1e-7;
      const auto x = t(xs, dt);
      check_against(vals(F::hardswish(x)), xs, hardswish_ref, tol, "hardswish");
      check_against(grad_of(&F::hardswish, x), xs,
                    [](double v) { return v < -3 ? 0.0 : (v <= 3 ? v / 3 + 0.5 : 1.0); }, tol, "hardswish gradient");
      BOOST_TEST(grad_of(&F::hardswish, x)[0] == 0.0);  // below -3: exactly 0
      BOOST_TEST(grad_of(&F::hardswish, x)[1] == -0.5);  // at -3: the middle piece
    }
  }
}

BOOST_AUTO_TEST_CASE(mish_matches_its_definition) {
  const Vec xs = {-100.0, -30.0, -5.0, -1.0, 0.0, 0.5, 3.0, 19.9, 20.1, 50.0};
  const auto x = t(xs);
  check_against(vals(F::mish(x)), xs, mish_ref, 1e-13, "mish float64");
  check_against(grad_of(&F::mish, x), xs, mish_grad_ref, 1e-12, "mish float64 gradient");

  // float32 over the whole range, through the vectorised contiguous loop:
  // within a few ulp of the double reference, no inf or NaN at either end.
  const auto sweep = mg::arange(-60.0, 90.0, 1.0 / 64, DType::float32);
  const Vec sx = vals(sweep), sy = vals(F::mish(sweep)), sg = grad_of(&F::mish, sweep);
  double worst = 0, worst_grad = 0;
  for (size_t i = 0; i < sx.size(); ++i) {
    worst = std::max(worst, std::abs(sy[i] - mish_ref(sx[i])) / std::max(std::abs(mish_ref(sx[i])), 1e-30));
    // The gradient crosses 0 near x = -1.19: relative to max(|ref|, 1) there.
    worst_grad = std::max(worst_grad, std::abs(sg[i] - mish_grad_ref(sx[i])) / std::max(std::abs(mish_grad_ref(sx[i])), 1.0));
    BOOST_TEST_REQUIRE(std::isfinite(sy[i]));
    BOOST_TEST_REQUIRE(std::isfinite(sg[i]));
  }
  BOOST_TEST(worst < 2e-6);
  BOOST_TEST(worst_grad < 2e-6);
}

BOOST_AUTO_TEST_CASE(strided_and_16_bit_inputs_take_the_same_values) {
  // A transposed view goes through the blocked loop, bfloat16 through the
  // converting one; both must agree with the contiguous float32 result (to
  // rounding: the loops may be compiled for different instruction sets, so
  // a multiply-add may or may not be fused).
  const auto x = mg::uniform({5, 7}, -3.0, 3.0);
  for (auto op : {&F::sin, &F::cos, &F::tan, &F::log1p, &F::erf, &F::expm1, &F::hardswish, &F::mish}) {
    const auto in = op == &F::log1p ? F::abs(x) : (op == &F::tan ? x / 3.0 : x);
    const auto xt = F::transpose(in, 0, 1);
    const Vec want = vals(op(xt.contiguous())), got = vals(op(xt));
    for (size_t i = 0; i < want.size(); ++i)
      BOOST_TEST(std::abs(got[i] - want[i]) <= 1e-6 * (std::abs(want[i]) + 1e-6), "strided element " << i);
    const auto xb = in.to(DType::bfloat16);
    const Vec ref = vals(op(xb.to(DType::float32))), low = vals(op(xb));
    for (size_t i = 0; i < ref.size(); ++i)
      BOOST_TEST(std::abs(low[i] - ref[i]) <= 4e-3 * std::abs(ref[i]) + 1e-6, "bfloat16 element " << i);
  }
}

BOOST_AUTO_TEST_SUITE_END()
