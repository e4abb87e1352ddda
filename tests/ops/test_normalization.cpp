// The normalization ops. F::layer_norm: rows of mean 0 and variance 1,
// values and gradients from the definition (computed here in double), mixed
// dtypes and errors. F::group_norm and F::instance_norm: values and
// gradients worked out by hand on tiny inputs, instance_norm against
// group_norm with one channel per group, mixed dtypes, autocast and the
// errors (which change nothing).
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "autodiff/inspect.hpp"
#include "core/simd.hpp"
#include "mixgrad/mixgrad.hpp"
#include "../common/test_util.hpp"

namespace {

using test_util::message_has;
using test_util::values;

namespace mg = mixgrad;
namespace F = mixgrad::F;
using mg::DType;
using mg::Tensor;

constexpr double kEps = 1e-5;

// x [1, 4, 2], two groups of two channels:
//   group 0 = channels 0, 1 = {1, 3, 5, 7}: mean 4, variance (9 + 1 + 1 + 9) / 4 = 5
//   group 1 = channels 2, 3 = {2, 2, 2, 6}: mean 3, variance (1 + 1 + 1 + 9) / 4 = 3
Tensor hand_input() { return mg::tensor({1.f, 3.f, 5.f, 7.f, 2.f, 2.f, 2.f, 6.f}, {1, 4, 2}); }

std::vector<double> hand_normalised() {
  const double s0 = std::sqrt(5.0 + kEps), s1 = std::sqrt(3.0 + kEps);
  return {-3 / s0, -1 / s0, 1 / s0, 3 / s0, -1 / s1, -1 / s1, -1 / s1, 3 / s1};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(layer_norm)

BOOST_AUTO_TEST_CASE(layer_norm_rows_have_mean_zero_and_variance_one) {
  mg::manual_seed(4);
  const auto x = mg::uniform({6, 10}, -5, 3);
  const auto y = values(F::layer_norm(x, {10}, mg::Tensor(), mg::Tensor(), 0.0));
  for (int r = 0; r < 6; ++r) {
    double mean = 0, var = 0;
    for (int j = 0; j < 10; ++j) mean += y[r * 10 + j] / 10;
    for (int j = 0; j < 10; ++j) var += (y[r * 10 + j] - mean) * (y[r * 10 + j] - mean) / 10;
    BOOST_TEST(std::abs(mean) < 1e-6);
    BOOST_TEST(var == 1.0, boost::test_tools::tolerance(1e-5));
  }
}

BOOST_AUTO_TEST_CASE(layer_norm_known_values_with_affine) {
  // Row [1, 2, 3]: mean 2, variance 2/3, so x_hat = [-sqrt(1.5), 0, sqrt(1.5)].
  const auto x = mg::tensor<double>({1, 2, 3, 10, 10, 10}, {2, 3});
  const auto w = mg::tensor<double>({2, 1, -1}, {3});
  const auto b = mg::tensor<double>({0.5, 0, 1}, {3});
  const auto y = values(F::layer_norm(x, {3}, w, b, 1e-12));
  const double h = std::sqrt(1.5);
  const std::vector<double> want = {-2 * h + 0.5, 0, -h + 1, 0.5, 0, 1};  // constant row: x_hat = 0
  for (size_t k = 0; k < want.size(); ++k) BOOST_TEST(y[k] == want[k], boost::test_tools::tolerance(1e-6));
}

BOOST_AUTO_TEST_CASE(layer_norm_weight_and_bias_gradients) {
  mg::manual_seed(8);
  const int rows = 70;  // more than one block of rows in the weight / bias sums
  mg::Tensor x = mg::uniform({rows, 3}, -1, 1, mg::DType::float64);
  mg::Tensor w = mg::uniform({3}, 0.5, 1.5, mg::DType::float64);
  mg::Tensor b = mg::zeros({3}, mg::DType::float64);
  mg::autodiff::GradManager gm;
  gm.attach({w, b});
  {
    auto rec = gm.record();
    gm.backward(F::layer_norm(x, {3}, w, b));
  }
  // d/db sum(y) = rows; d/dw sum(y) = sum over rows of x_hat, and x_hat sums to ~0 per row
  // but not per column, so compute it here.
  const auto xv = values(x);
  std::vector<double> want_w(3, 0.0);
  for (int r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int j = 0; j < 3; ++j) m += xv[r * 3 + j] / 3;
    for (int j = 0; j < 3; ++j) v += (xv[r * 3 + j] - m) * (xv[r * 3 + j] - m) / 3;
    for (int j = 0; j < 3; ++j) want_w[j] += (xv[r * 3 + j] - m) / std::sqrt(v + 1e-5);
  }
  BOOST_TEST(values(b.grad()) == std::vector<double>({rows, rows, rows}), boost::test_tools::per_element());
  const auto gw = values(w.grad());
  for (int j = 0; j < 3; ++j) BOOST_TEST(gw[j] == want_w[j], boost::test_tools::tolerance(1e-10));
}

// The kernels are compiled for the baseline ISA, AVX2 and AVX-512: each
// variant's output and gradients against the float64 layer norm, and the
// variants against each other (the same sums in the same order; only the
// rounding of contracted multiply-adds may differ). 37 columns: vector
// bodies and tails; 70 rows: more than one block of weight / bias partials.
BOOST_AUTO_TEST_CASE(layer_norm_instruction_set_variants_agree_with_float64) {
  mg::manual_seed(12);
  const mg::Tensor x64 = mg::uniform({70, 37}, -2, 3, DType::float64);
  const mg::Tensor w64 = mg::uniform({37}, 0.5, 1.5, DType::float64), b64 = mg::uniform({37}, -1, 1, DType::float64);
  const mg::Tensor dy64 = mg::normal({70, 37}, 0, 1, DType::float64);
  auto run = [&](DType dt) {
    mg::Tensor x = x64.to(dt), w = w64.to(DType::float32), b = b64.to(DType::float32);
    if (dt == DType::float64) {
      w = w64.clone();
      b = b64.clone();
    }
    mg::autodiff::GradManager gm;
    gm.attach({x, w, b});
    mg::Tensor y;
    {
      auto rec = gm.record();
      y = F::layer_norm(x, {37}, w, b);
      gm.backward(y, dy64.to(dt));
    }
    return std::vector<std::vector<double>>{values(y), values(x.grad()), values(w.grad()), values(b.grad())};
  };
  const auto want = run(DType::float64);
  std::vector<mg::simd::Level> levels{mg::simd::Level::portable};
  if (mg::simd::available() >= mg::simd::Level::avx2) levels.push_back(mg::simd::Level::avx2);
  if (mg::simd::available() >= mg::simd::Level::avx512) levels.push_back(mg::simd::Level::avx512);
  std::vector<std::vector<double>> first;
  for (mg::simd::Level level : levels) {
    mg::simd::LevelScope scope(level);
    const auto got = run(DType::float32);
    for (size_t k = 0; k < got.size(); ++k) {
      double worst = 0;
      for (size_t i = 0; i < got[k].size(); ++i)
        worst = std::max(worst, std::abs(got[k][i] - want[k][i]) / (1 + std::abs(want[k][i])));
      BOOST_TEST(worst < 2e-5, "level " << mg::simd::to_string(level) << ", output " << k << ": " << worst);
      if (first.empty()) continue;
      double apart = 0;
      for (size_t i = 0; i < got[k].size(); ++i)
        apart = std::max(apart, std::abs(got[k][i] - first[k][i]) / (1 + std::abs(first[k][i])));
      BOOST_TEST(apart < 1e-6, "level " << mg::simd::to_string(level) << " against portable, output " << k);
    }
    if (first.empty()) first = got;
  }
}

BOOST_AUTO_TEST_CASE(layer_norm_mixed_dtypes_and_errors) {
  mg::Tensor w = mg::ones({4});
  const auto x = mg::uniform({2, 4}).to(mg::DType::bfloat16);
  mg::autodiff::GradManager gm;
  gm.attach(w);
  {
    auto rec = gm.record();
    const auto y = F::layer_norm(x, {4}, w);
    BOOST_TEST(y.dtype() == mg::DType::bfloat16);
    gm.backward(y);
  }
  BOOST_TEST(w.grad().dtype() == mg::DType::float32);
  BOOST_CHECK_THROW(F::layer_norm(x, {2}), mg::ShapeError);
  BOOST_CHECK_THROW(F::layer_norm(x, {2, 2, 4}), mg::ShapeError);
  try {
    F::layer_norm(x, {4}, mg::ones({3}));
    BOOST_FAIL("expected a ShapeError");
  } catch (const mg::ShapeError& e) {
    BOOST_TEST(message_has(e, {"layer_norm", "weight", "float32[3]"}), e.what());
  }
  BOOST_CHECK_THROW(F::layer_norm(mg::zeros({2, 4}, mg::DType::int32), {4}), mg::DTypeError);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(group_norm)

BOOST_AUTO_TEST_CASE(values_and_per_channel_affine_by_hand) {
  const auto xhat = hand_normalised();
  const auto y = F::group_norm(hand_input(), 2).to_vector<double>();
  BOOST_TEST_REQUIRE(y.size() == 8u);
  for (int i = 0; i < 8; ++i) BOOST_TEST(y[i] == xhat[i], boost::test_tools::tolerance(1e-6));

  const Tensor w = mg::tensor({1.f, 2.f, 3.f, 4.f}, {4});
  const Tensor b = mg::tensor({0.f, 1.f, 0.f, -1.f}, {4});
  const auto ya = F::group_norm(hand_input(), 2, w, b).to_vector<double>();
  const double wv[4] = {1, 2, 3, 4}, bv[4] = {0, 1, 0, -1};
  for (int i = 0; i < 8; ++i)
    BOOST_TEST(ya[i] == xhat[i] * wv[i / 2] + bv[i / 2], boost::test_tools::tolerance(1e-6));
}

BOOST_AUTO_TEST_CASE(gradients_by_hand) {
  Tensor x = hand_input();
  Tensor w = mg::tensor({1.f, 2.f, 3.f, 4.f}, {4});
  Tensor b = mg::zeros({4});
  mg::autodiff::GradManager gm;
  gm.attach(x);
  gm.attach(w);
  gm.attach(b);
  {
    auto rec = gm.record();
    Tensor y = F::group_norm(x, 2, w, b);
    gm.backward(y, mg::ones({1, 4, 2}));
  }
  // dL/dw[c] = sum over c's positions of xhat; dL/db[c] = number of positions.
  const auto xhat = hand_normalised();
  const auto gw = w.grad().to_vector<double>(), gb = b.grad().to_vector<double>();
  for (int c = 0; c < 4; ++c) {
    BOOST_TEST(gw[c] == xhat[2 * c] + xhat[2 * c + 1], boost::test_tools::tolerance(1e-6));
    BOOST_TEST(gb[c] == 2.0);
  }
  // Upstream g = weight[c]: dx = rstd * (w g - mean(w g) - xhat * mean(w g xhat)) per group.
  const double rstd[2] = {1 / std::sqrt(5.0 + kEps), 1 / std::sqrt(3.0 + kEps)};
  const double wv[4] = {1, 2, 3, 4};
  const auto gx = x.grad().to_vector<double>();
  for (int grp = 0; grp < 2; ++grp) {
    double m = 0, mx = 0;
    for (int i = 4 * grp; i < 4 * grp + 4; ++i) {
      m += wv[i / 2] / 4;
      mx += wv[i / 2] * xhat[i] / 4;
    }
    for (int i = 4 * grp; i < 4 * grp + 4; ++i)
      BOOST_TEST(std::abs(gx[i] - rstd[grp] * (wv[i / 2] - m - xhat[i] * mx)) <= 1e-5, "dx element " << i);
  }
}

BOOST_AUTO_TEST_CASE(instance_norm_is_group_norm_with_one_channel_per_group) {
  // Channel 0 = {1, 3}: mean 2, variance 1. Channel 1 = {4, 4}: variance 0.
  const auto y = F::instance_norm(mg::tensor({1.f, 3.f, 4.f, 4.f}, {1, 2, 2})).to_vector<double>();
  const double r = 1 / std::sqrt(1.0 + kEps);
  const std::vector<double> want{-r, r, 0, 0};
  for (int i = 0; i < 4; ++i) BOOST_TEST(y[i] == want[i], boost::test_tools::tolerance(1e-6));

  mg::manual_seed(5);
  const Tensor x = mg::uniform({2, 3, 4, 5}, -2, 2);
  const Tensor w = mg::uniform({3}, 0.5, 1.5), b = mg::uniform({3}, -1, 1);
  BOOST_TEST(F::instance_norm(x, w, b).to_vector<float>() == F::group_norm(x, 3, w, b).to_vector<float>(),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(bfloat16_input_with_float32_parameters) {
  mg::manual_seed(9);
  const Tensor x32 = mg::uniform({2, 4, 3, 3}, -3, 3);
  const Tensor x = x32.to(DType::bfloat16);
  Tensor w = mg::uniform({4}, 0.5, 1.5), b = mg::uniform({4}, -1, 1);
  mg::autodiff::GradManager gm;
  gm.attach(w);
  Tensor y;
  {
    auto rec = gm.record();
    y = F::group_norm(x, 2, w, b);
    gm.backward(y, mg::ones(y.shape(), DType::bfloat16));
  }
  BOOST_TEST(y.dtype() == DType::bfloat16);
  BOOST_TEST(w.grad().dtype() == DType::float32);
  // Same statistics as float32 on the same (bfloat16-rounded) values.
  const auto ref = F::group_norm(x.to(DType::float32), 2, w, b).to_vector<double>();
  const auto got = y.to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) BOOST_TEST(std::abs(got[i] - ref[i]) <= 0.02 * (std::abs(ref[i]) + 0.5));
}

BOOST_AUTO_TEST_CASE(autocast_runs_both_in_float32_on_the_cpu) {
  mg::manual_seed(2);
  const Tensor x = mg::uniform({2, 4, 3}, -1, 1, DType::bfloat16);
  mg::amp::autocast ac(true, DType::bfloat16);
  BOOST_TEST(F::group_norm(x, 2).dtype() == DType::float32);
  BOOST_TEST(F::instance_norm(x).dtype() == DType::float32);
}

BOOST_AUTO_TEST_CASE(bad_input_throws_a_typed_error_naming_the_op_and_changes_nothing) {
  Tensor x = hand_input();
  Tensor w = mg::ones({4});
  mg::autodiff::GradManager gm;
  gm.attach(x);
  gm.attach(w);
  auto rec = gm.record();
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const mg::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string groups = message([&] { (void)F::group_norm(x, 3, w); });
  BOOST_TEST(groups.find("group_norm") != std::string::npos, groups);
  BOOST_TEST(groups.find("float32[1, 4, 2]") != std::string::npos, groups);
  BOOST_CHECK_THROW((void)F::group_norm(x, 3), mg::ShapeError);
  BOOST_CHECK_THROW((void)F::group_norm(x, 0), mg::ShapeError);
  BOOST_CHECK_THROW((void)F::group_norm(x, 2, mg::ones({2})), mg::ShapeError);
  BOOST_CHECK_THROW((void)F::group_norm(x, 2, w, mg::ones({4, 1})), mg::ShapeError);
  BOOST_CHECK_THROW((void)F::group_norm(mg::ones({4}), 2), mg::ShapeError);
  BOOST_CHECK_THROW((void)F::group_norm(x, 2, w, Tensor(), -1.0), mg::ValueError);
  BOOST_CHECK_THROW((void)F::group_norm(mg::ones({1, 4, 2}, DType::int32), 2), mg::DTypeError);
  BOOST_CHECK_THROW((void)F::group_norm(x, 2, mg::ones({4}, DType::int32)), mg::DTypeError);
  const std::string inst = message([&] { (void)F::instance_norm(x, mg::ones({3})); });
  BOOST_TEST(inst.find("instance_norm") != std::string::npos, inst);
  BOOST_TEST(inst.find("float32[3]") != std::string::npos, inst);
  BOOST_CHECK_THROW((void)F::instance_norm(mg::ones({5})), mg::ShapeError);
  BOOST_TEST(mg::autodiff::detail::tape_size(gm) == 0u);
  BOOST_TEST(x.to_vector<float>() == hand_input().to_vector<float>(), boost::test_tools::per_element());
  BOOST_TEST(!x.grad().defined());
}

BOOST_AUTO_TEST_SUITE_END()
