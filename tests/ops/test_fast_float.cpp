// The float functions of kernels/fast_float.hpp, which the unary ops run on
// in float, float16 and bfloat16 (exp, log, log1p, expm1, erf, sigmoid and
// the GELUs, softplus and mish built from them), on the CPU and in CUDA:
// each within a few ulp of the float64 value over its whole range (a sweep
// of values and one of bit patterns, so every binade is visited), and the
// same as libm at the special values: signed zeros, infinities, NaN,
// subnormals and the ends of the range.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "kernels/fast_float.hpp"

namespace {

namespace k = mixgrad::kernels;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

float from_bits(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

uint32_t to_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

/// |f(x) - exact| in units of the last place of the exact value rounded to
/// float, where that is finite and not 0.
template <class F, class Exact>
double ulp_error(F f, Exact exact, float x) {
  const double e = exact(static_cast<double>(x));
  const float r = static_cast<float>(e);
  if (!std::isfinite(r) || r == 0.f) return 0.0;
  const float ulp = std::nextafter(std::fabs(r), kInf) - std::fabs(r);
  return std::fabs(static_cast<double>(f(x)) - e) / ulp;
}

/// The largest ulp error of f over n + 1 evenly spaced points of [lo, hi]
/// and over every 211th bit pattern of the positive and negative floats
/// whose magnitude lies in [tiny, huge].
template <class F, class Exact>
double worst_ulp(F f, Exact exact, float lo, float hi, float tiny, float huge) {
  double worst = 0;
  const int n = 400000;
  for (int i = 0; i <= n; ++i) worst = std::max(worst, ulp_error(f, exact, lo + (hi - lo) * static_cast<float>(i) / n));
  for (uint32_t b = to_bits(tiny); b <= to_bits(huge); b += 211) {
    worst = std::max(worst, ulp_error(f, exact, from_bits(b)));
    worst = std::max(worst, ulp_error(f, exact, -from_bits(b)));
  }
  return worst;
}

/// Where libm gives NaN, an infinity or a zero: the same, bit for bit
/// (the zero's sign too; NaN: any NaN). Elsewhere within 3 ulp of libm.
void check_like_libm(const char* name, float got, float libm, float x) {
  if (std::isnan(libm)) {
    BOOST_TEST(std::isnan(got), name << "(" << x << ") = " << got << ", libm: NaN");
  } else if (std::isinf(libm) || libm == 0.f) {
    BOOST_TEST(to_bits(got) == to_bits(libm), name << "(" << x << ") = " << got << ", libm: " << libm);
  } else {
    const float ulp = std::nextafter(std::fabs(libm), kInf) - std::fabs(libm);
    BOOST_TEST(std::fabs(got - libm) <= 3 * ulp, name << "(" << x << ") = " << got << ", libm: " << libm);
  }
}

const float kSpecial[] = {0.f,    -0.f,   kInf,    -kInf,    kNaN,   1e-45f, -1e-45f, 1e-40f, -1e-40f,
                          -1.f,   1.f,    100.f,   -100.f,   88.8f,  -104.f, -200.f,  3e38f,  -3e38f};

}  // namespace

BOOST_AUTO_TEST_SUITE(fast_float)

BOOST_AUTO_TEST_CASE(exp_float_is_within_2_ulp_and_keeps_subnormals_and_overflow) {
  const auto exact = [](double x) { return std::exp(x); };
  const double worst = worst_ulp(k::exp_float, exact, -103.f, 88.7f, 1e-30f, 103.f);
  BOOST_TEST(worst <= 2.0, "worst " << worst << " ulp");
  // Subnormal results (below 2^-126, x < -87.3) are correctly rounded, not flushed.
  BOOST_TEST(k::exp_float(-100.f) > 0.f);
  BOOST_TEST(std::fabs(k::exp_float(-100.f) - std::exp(-100.f)) <= 2 * std::numeric_limits<float>::denorm_min());
  for (const float x : {0.f, -0.f, kInf, -kInf, kNaN, 88.8f, 89.f, 1e30f, -104.f, -1e30f, 1e-45f})
    check_like_libm("exp_float", k::exp_float(x), std::exp(x), x);
}

BOOST_AUTO_TEST_CASE(log_float_is_within_2_ulp_down_to_the_subnormals) {
  const auto exact = [](double x) { return std::log(x); };
  const double worst = worst_ulp(k::log_float, exact, 0.01f, 10.f, 1e-45f, 3.4e38f);
  BOOST_TEST(worst <= 2.0, "worst " << worst << " ulp");
  for (const float x : kSpecial) check_like_libm("log_float", k::log_float(x), std::log(x), x);
}

BOOST_AUTO_TEST_CASE(log1p_float_is_within_3_ulp_and_keeps_minus_zero) {
  const auto exact = [](double x) { return std::log1p(x); };
  const double worst = worst_ulp(k::log1p_float, exact, -0.9999f, 10.f, 1e-38f, 3.4e38f);
  BOOST_TEST(worst <= 3.0, "worst " << worst << " ulp");
  for (const float x : kSpecial) check_like_libm("log1p_float", k::log1p_float(x), std::log1p(x), x);
}

BOOST_AUTO_TEST_CASE(expm1_float_is_within_3_ulp_near_zero_and_beyond) {
  const auto exact = [](double x) { return std::expm1(x); };
  const double worst = worst_ulp(k::expm1_float, exact, -20.f, 88.f, 1e-38f, 88.f);
  BOOST_TEST(worst <= 3.0, "worst " << worst << " ulp");
  for (const float x : kSpecial) check_like_libm("expm1_float", k::expm1_float(x), std::expm1(x), x);
}

BOOST_AUTO_TEST_CASE(erf_float_is_within_3_ulp_and_saturates_at_plus_minus_one) {
  const auto exact = [](double x) { return std::erf(x); };
  const double worst = worst_ulp(k::erf_float, exact, -6.f, 6.f, 1e-38f, 10.f);
  BOOST_TEST(worst <= 3.0, "worst " << worst << " ulp");
  for (const float x : kSpecial) check_like_libm("erf_float", k::erf_float(x), std::erf(x), x);
  // Either side of the switch between the two approximations.
  for (const float x : {0.921875f, std::nextafter(0.921875f, 0.f), 3.92f, std::nextafter(3.92f, 0.f)})
    BOOST_TEST(ulp_error(k::erf_float, exact, x) <= 3.0, "x = " << x);
}

// sigmoid_float, which GELU's tanh form and SiLU run on in float: within 4
// ulp of the float64 value wherever that is a normal float, exactly 1 from
// x = 17 on, 0 below -88 (a subnormal under 6e-39), NaN kept, and a
// sigmoid on both sides of the clamps.
BOOST_AUTO_TEST_CASE(sigmoid_float_is_within_4_ulp_of_the_exact_value) {
  using mixgrad::kernels::sigmoid_float;
  float worst = 0;
  for (float x = -87.f; x <= 40.f; x += 0.00731f) {
    const double exact = 1.0 / (1.0 + std::exp(-static_cast<double>(x)));
    const float ref = static_cast<float>(exact), y = sigmoid_float(x);
    const float ulp = std::nextafter(ref, 2.f) - ref;
    worst = std::max(worst, std::fabs(static_cast<float>(y - exact)) / ulp);
  }
  BOOST_TEST(worst <= 4.f, "worst error " << worst << " ulp");
  for (const float x : {17.f, 30.f, 88.f, 1e30f, kInf}) BOOST_TEST(sigmoid_float(x) == 1.f, "x = " << x);
  for (const float x : {-88.5f, -100.f, -1e30f, -kInf}) BOOST_TEST(sigmoid_float(x) == 0.f, "x = " << x);
  BOOST_TEST(sigmoid_float(0.f) == 0.5f);
  BOOST_TEST(std::isnan(sigmoid_float(kNaN)));
}

BOOST_AUTO_TEST_SUITE_END()
