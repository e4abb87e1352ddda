#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "mixgrad/mixgrad.hpp"
#include "mixgrad/ops/creation.hpp"

namespace mg = mixgrad;
namespace init = mixgrad::nn::init;

namespace {
struct Stats {
  double mean, var, lo, hi;
};
Stats stats(const mg::Tensor& t) {
  const auto v = t.to_vector<double>();
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
  double var = 0;
  for (double x : v) var += (x - mean) * (x - mean);
  return {mean, var / v.size(), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
}
}  // namespace

BOOST_AUTO_TEST_SUITE(init_functions)

BOOST_AUTO_TEST_CASE(fans_and_gains) {
  BOOST_TEST((init::fan_in_and_fan_out({64, 32, 3, 3}) == std::make_pair(int64_t{288}, int64_t{576})));
  BOOST_TEST((init::fan_in_and_fan_out({10, 784}) == std::make_pair(int64_t{784}, int64_t{10})));
  BOOST_CHECK_THROW(init::fan_in_and_fan_out({10}), mg::ShapeError);
  BOOST_TEST(init::calculate_gain(init::Nonlinearity::relu) == std::sqrt(2.0));
  BOOST_TEST(init::calculate_gain(init::Nonlinearity::tanh) == 5.0 / 3.0);
  BOOST_TEST(init::calculate_gain(init::Nonlinearity::leaky_relu, std::sqrt(5.0)) == std::sqrt(1.0 / 3.0),
             boost::test_tools::tolerance(1e-15));
}

BOOST_AUTO_TEST_CASE(kaiming_uniform_bound_and_variance) {
  // PyTorch's Linear default: a = sqrt(5) gives bound 1/sqrt(fan_in).
  auto w = mg::empty({256, 400});
  const void* storage = w.raw_data();
  const uint64_t version = w.version();
  auto r = init::kaiming_uniform_(w, {.a = std::sqrt(5.0)});
  BOOST_TEST(w.version() > version);
  BOOST_TEST(r.raw_data() == storage);
  const double bound = 1.0 / 20.0;
  const Stats s = stats(w);
  BOOST_TEST(s.lo >= -bound);
  BOOST_TEST(s.hi <= bound);
  BOOST_TEST(s.hi > 0.99 * bound);
  BOOST_TEST(std::abs(s.mean) < 0.01 * bound);
  BOOST_TEST(s.var == bound * bound / 3, boost::test_tools::tolerance(0.02));
}

BOOST_AUTO_TEST_CASE(normal_initialisers_have_the_right_std) {
  auto w = mg::empty({128, 64, 3, 3});
  init::kaiming_normal_(w, {.mode = init::FanMode::fan_out, .nonlinearity = init::Nonlinearity::relu});
  const double std_want = std::sqrt(2.0 / (128 * 9));
  BOOST_TEST(std::sqrt(stats(w).var) == std_want, boost::test_tools::tolerance(0.02));
  auto x = mg::empty({300, 200}, mg::DType::float64);
  init::xavier_normal_(x, 2.0);
  BOOST_TEST(std::sqrt(stats(x).var) == 2.0 * std::sqrt(2.0 / 500), boost::test_tools::tolerance(0.02));
  init::normal_(x, 3.0, 0.5);
  BOOST_TEST(stats(x).mean == 3.0, boost::test_tools::tolerance(0.01));
}

BOOST_AUTO_TEST_CASE(xavier_uniform_and_constants) {
  auto w = mg::empty({30, 70}, mg::DType::bfloat16);
  init::xavier_uniform_(w);
  const double bound = std::sqrt(6.0 / 100);
  const Stats s = stats(w);
  BOOST_TEST(s.lo >= -bound * (1 + 1e-2));
  BOOST_TEST(s.hi <= bound * (1 + 1e-2));
  BOOST_TEST(s.hi > 0.9 * bound);
  init::ones_(w);
  BOOST_TEST(stats(w).lo == 1.0);
  init::zeros_(w);
  BOOST_TEST(stats(w).hi == 0.0);
  init::constant_(w, 0.5);
  BOOST_TEST(stats(w).mean == 0.5);
  init::uniform_(w, 2.0, 3.0);
  BOOST_TEST(stats(w).lo >= 2.0);
  BOOST_TEST(stats(w).hi <= 3.0);
}

BOOST_AUTO_TEST_CASE(seeded_and_in_place_on_views) {
  auto a = mg::empty({8, 8});
  auto b = mg::empty({8, 8});
  mg::manual_seed(7);
  init::kaiming_uniform_(a);
  mg::manual_seed(7);
  init::kaiming_uniform_(b);
  BOOST_TEST(a.to_vector<float>() == b.to_vector<float>(), boost::test_tools::per_element());
  // A view: only its elements change.
  auto z = mg::zeros({4, 4});
  init::ones_(z.narrow(1, 1, 2));
  BOOST_TEST(z.at<float>({2, 0}) == 0.f);
  BOOST_TEST(z.at<float>({2, 1}) == 1.f);
  BOOST_TEST(z.at<float>({3, 2}) == 1.f);
  BOOST_TEST(z.at<float>({3, 3}) == 0.f);
}

BOOST_AUTO_TEST_CASE(errors) {
  BOOST_CHECK_THROW(init::kaiming_uniform_(mg::zeros({5})), mg::ShapeError);
  BOOST_CHECK_THROW(init::zeros_(mg::arange(3)), mg::DTypeError);
  BOOST_CHECK_THROW(init::xavier_uniform_(mg::Tensor()), mg::StateError);
  BOOST_CHECK_THROW(init::kaiming_normal_(mg::zeros({0, 3}), {.mode = init::FanMode::fan_out}), mg::ShapeError);
}

BOOST_AUTO_TEST_SUITE_END()
