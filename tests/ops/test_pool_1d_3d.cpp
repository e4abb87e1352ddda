// F::max_pool1d / F::avg_pool1d on hand-worked sequences and F::max_pool3d /
// F::avg_pool3d against direct loops over each box, on oneDNN and on the
// built-in kernels: values, the max-pool gradient's routing, padding that
// never wins (max) and is not counted (avg), autocast, the nn modules and
// errors naming the op. The registry (cases_nn.cpp) checks their gradients
// in float64.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../common/test_util.hpp"
#include "backend/onednn/onednn.hpp"
#include "mixgrad/mixgrad.hpp"

namespace {
namespace mg = mixgrad;
namespace F = mg::F;
namespace dnn = mg::backend::onednn;
using test_util::values;
namespace tt = boost::test_tools;

// Max (or mean over the inside positions) of each box of x [N, C, D, H, W],
// and for max the number of boxes each input element wins (the gradient of
// sum(y)); ties go to the first element in row-major order.
struct Pool3dRef {
  mg::Shape shape;
  std::vector<double> y, wins;
};
Pool3dRef pool3d_reference(const mg::Tensor& x, const F::Pool3dOptions& o, bool is_max) {
  const auto xv = x.to_vector<double>();
  const auto& s = x.shape();
  const int64_t k[3] = {o.kernel_size.d, o.kernel_size.h, o.kernel_size.w};
  const int64_t st[3] = {o.stride.d ? o.stride.d : k[0], o.stride.h ? o.stride.h : k[1], o.stride.w ? o.stride.w : k[2]};
  const int64_t p[3] = {o.padding.d, o.padding.h, o.padding.w};
  const int64_t in[3] = {s[2], s[3], s[4]};
  int64_t out[3];
  for (int i = 0; i < 3; ++i) out[i] = (in[i] + 2 * p[i] - k[i]) / st[i] + 1;
  Pool3dRef r{mg::Shape{s[0], s[1], out[0], out[1], out[2]}, {}, std::vector<double>(xv.size(), 0.0)};
  for (int64_t nc = 0; nc < s[0] * s[1]; ++nc)
    for (int64_t a = 0; a < out[0]; ++a)
      for (int64_t b = 0; b < out[1]; ++b)
        for (int64_t c = 0; c < out[2]; ++c) {
          double best = -std::numeric_limits<double>::infinity(), sum = 0;
          int64_t arg = -1, count = 0;
          for (int64_t i = a * st[0] - p[0]; i < a * st[0] - p[0] + k[0]; ++i)
            for (int64_t j = b * st[1] - p[1]; j < b * st[1] - p[1] + k[1]; ++j)
              for (int64_t l = c * st[2] - p[2]; l < c * st[2] - p[2] + k[2]; ++l) {
                if (i < 0 || i >= in[0] || j < 0 || j >= in[1] || l < 0 || l >= in[2]) continue;
                const int64_t at = ((nc * in[0] + i) * in[1] + j) * in[2] + l;
                sum += xv[at];
                ++count;
                if (xv[at] > best) best = xv[at], arg = at;
              }
          r.y.push_back(is_max ? best : sum / count);
          if (is_max) r.wins[arg] += 1;
        }
  return r;
}

void expect_pool3d(mg::Shape xs, F::Pool3dOptions o) {
  mg::manual_seed(11);
  const mg::Tensor x = mg::uniform(xs, -1, 1);
  for (bool is_max : {true, false}) {
    const Pool3dRef want = pool3d_reference(x, o, is_max);
    for (dnn::Mode m : {dnn::Mode::always, dnn::Mode::never}) {
      dnn::ModeScope scope(m);
      const mg::Tensor xi = x.clone();  // a fresh gradient per run
      mg::autodiff::GradManager gm;
      gm.attach(xi);
      mg::Tensor y;
      {
        auto rec = gm.record();
        y = is_max ? F::max_pool3d(xi, o) : F::avg_pool3d(xi, o);
        gm.backward(F::sum(y));
      }
      BOOST_TEST_REQUIRE(y.shape() == want.shape);
      const auto got = values(y);
      for (size_t i = 0; i < got.size(); ++i)
        BOOST_TEST(std::abs(got[i] - want.y[i]) < 1e-6, (is_max ? "max" : "avg") << " mode " << static_cast<int>(m)
                                                                                  << " element " << i);
      if (is_max) BOOST_TEST(values(xi.grad()) == want.wins, tt::per_element());
    }
  }
}
}  // namespace

BOOST_AUTO_TEST_SUITE(pool_1d_3d)

BOOST_AUTO_TEST_CASE(pool1d_known_values_and_gradient) {
  for (dnn::Mode m : {dnn::Mode::always, dnn::Mode::never}) {
    dnn::ModeScope scope(m);
    const mg::Tensor ramp = mg::tensor({0.f, 1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f}, {1, 1, 8});
    BOOST_TEST(values(F::max_pool1d(ramp)) == std::vector<double>({1, 3, 5, 7}), tt::per_element());
    BOOST_TEST(values(F::avg_pool1d(ramp)) == std::vector<double>({0.5, 2.5, 4.5, 6.5}), tt::per_element());

    // Windows [-1, 1], [1, 3], [3, 5], [5, 7] over 7 values (index -1 and 7 are padding).
    const mg::Tensor x = mg::tensor({3.f, -1.f, 4.f, 1.f, -5.f, 9.f, 2.f}, {1, 1, 7});
    const F::Pool1dOptions o{.kernel_size = 3, .stride = 2, .padding = 1};
    mg::autodiff::GradManager gm;
    gm.attach(x);
    {
      auto rec = gm.record();
      const mg::Tensor y = F::max_pool1d(x, o);
      BOOST_TEST(y.shape() == mg::Shape({1, 1, 4}));
      BOOST_TEST(values(y) == std::vector<double>({3, 4, 9, 9}), tt::per_element());
      gm.backward(F::sum(y));
    }
    // 9 wins two windows: its gradient is 2.
    BOOST_TEST(values(x.grad()) == std::vector<double>({1, 0, 1, 0, 0, 2, 0}), tt::per_element());
    const auto avg = values(F::avg_pool1d(x, o));
    const std::vector<double> want{(3.0 - 1.0) / 2, 4.0 / 3, 5.0 / 3, (9.0 + 2.0) / 2};
    for (size_t i = 0; i < want.size(); ++i) BOOST_TEST(avg[i] == want[i], tt::tolerance(1e-6));

    // All-negative input with padding: the padding never wins.
    const mg::Tensor neg = mg::full({1, 2, 3}, -4.0);
    for (double v : values(F::max_pool1d(neg, {.kernel_size = 2, .stride = 1, .padding = 1}))) BOOST_TEST(v == -4.0);
  }
}

BOOST_AUTO_TEST_CASE(pool1d_keeps_bfloat16_under_autocast) {
  const mg::Tensor x = mg::uniform({2, 3, 10}).to(mg::DType::bfloat16);
  mg::amp::autocast scope;
  BOOST_TEST(F::max_pool1d(x).dtype() == mg::DType::bfloat16);
  BOOST_TEST(F::avg_pool1d(x, {.kernel_size = 3}).dtype() == mg::DType::bfloat16);
}

BOOST_AUTO_TEST_CASE(pool1d_errors_name_the_op) {
  using test_util::check_error;
  check_error<mg::ShapeError>([] { F::max_pool1d(mg::zeros({1, 2, 4, 4})); }, {"max_pool1d", "float32[1, 2, 4, 4]"});
  check_error<mg::ShapeError>([] { F::avg_pool1d(mg::zeros({2, 4})); }, {"avg_pool1d", "float32[2, 4]"});
  check_error<mg::ShapeError>([] { F::max_pool1d(mg::zeros({1, 1, 8}), {.kernel_size = 2, .padding = 2}); },
                              {"max_pool1d", "padding 2"});
  check_error<mg::ShapeError>([] { F::avg_pool1d(mg::zeros({1, 1, 2}), {.kernel_size = 3}); },
                              {"avg_pool1d", "larger than padded input", "float32[1, 1, 2]"});
}

BOOST_AUTO_TEST_CASE(pool1d_modules) {
  mg::nn::MaxPool1d mp(3, {.stride = 2, .padding = 1});
  mg::nn::AvgPool1d ap(2);
  const mg::Tensor x = mg::uniform({2, 3, 9});
  BOOST_TEST(mp(x).shape() == mg::Shape({2, 3, 5}));
  BOOST_TEST(values(mp(x)) == values(F::max_pool1d(x, {.kernel_size = 3, .stride = 2, .padding = 1})),
             tt::per_element());
  BOOST_TEST(ap(x).shape() == mg::Shape({2, 3, 4}));
  BOOST_TEST(mp.describe() == "MaxPool1d(kernel_size=3, stride=2, padding=1)");
  BOOST_TEST(ap.describe() == "AvgPool1d(kernel_size=2, stride=2, padding=0)");
  BOOST_CHECK_THROW(mg::nn::MaxPool1d(0), mg::ValueError);
  BOOST_CHECK_THROW(mg::nn::AvgPool1d(2, {.stride = -1}), mg::ValueError);
  BOOST_CHECK_THROW(mp(mg::zeros({2, 3, 4, 4})), mg::ShapeError);
}

BOOST_AUTO_TEST_CASE(pool3d_matches_direct_loops) {
  expect_pool3d({2, 3, 4, 4, 4}, {.kernel_size = 2});
  expect_pool3d({1, 2, 5, 6, 7}, {.kernel_size = {3, 3, 2}, .stride = {2, 1, 2}, .padding = {1, 1, 0}});
  expect_pool3d({1, 2, 3, 5, 5}, {.kernel_size = {2, 3, 3}, .stride = {1, 2, 2}, .padding = {1, 1, 1}});
  // Large enough for oneDNN in the default mode as well.
  expect_pool3d({2, 8, 8, 16, 16}, {.kernel_size = 3, .stride = 2, .padding = 1});
}

// After PyTorch test_autocast.py's CPU float32 lists (AutocastCPUTestLists:
// avg_pool3d and max_pool3d given bfloat16 inputs return float32).
BOOST_AUTO_TEST_CASE(pool3d_runs_in_float32_under_cpu_autocast) {
  mg::manual_seed(12);
  const mg::Tensor x = mg::uniform({1, 2, 4, 4, 4}).to(mg::DType::bfloat16);
  const mg::Tensor want_max = F::max_pool3d(x.to(mg::DType::float32));
  const mg::Tensor want_avg = F::avg_pool3d(x.to(mg::DType::float32), {.kernel_size = 3, .stride = 1, .padding = 1});
  mg::amp::autocast scope;
  const mg::Tensor got_max = F::max_pool3d(x);
  const mg::Tensor got_avg = F::avg_pool3d(x, {.kernel_size = 3, .stride = 1, .padding = 1});
  BOOST_TEST(got_max.dtype() == mg::DType::float32);
  BOOST_TEST(got_avg.dtype() == mg::DType::float32);
  BOOST_TEST(values(got_max) == values(want_max), tt::per_element());
  BOOST_TEST(values(got_avg) == values(want_avg), tt::per_element());
}

BOOST_AUTO_TEST_CASE(pool3d_errors_name_the_op) {
  using test_util::check_error;
  check_error<mg::ShapeError>([] { F::max_pool3d(mg::zeros({1, 2, 4, 4})); }, {"max_pool3d", "float32[1, 2, 4, 4]"});
  check_error<mg::ShapeError>([] { F::avg_pool3d(mg::zeros({1, 1, 1, 4, 4}), {.kernel_size = 2}); },
                              {"avg_pool3d", "larger than padded input", "float32[1, 1, 1, 4, 4]"});
  check_error<mg::ShapeError>([] { F::max_pool3d(mg::zeros({1, 1, 4, 4, 4}), {.kernel_size = 2, .padding = {0, 2, 0}}); },
                              {"max_pool3d", "padding (0, 2, 0)"});
  check_error<mg::ShapeError>([] { F::avg_pool3d(mg::zeros({1, 1, 4, 4, 4}), {.kernel_size = {2, 0, 2}}); },
                              {"avg_pool3d", "kernel_size (2, 0, 2)"});
}

BOOST_AUTO_TEST_CASE(pool3d_modules) {
  mg::nn::MaxPool3d mp(2);
  mg::nn::AvgPool3d ap({1, 2, 2}, {.padding = {0, 1, 1}});
  const mg::Tensor x = mg::uniform({2, 3, 4, 6, 6});
  BOOST_TEST(mp(x).shape() == mg::Shape({2, 3, 2, 3, 3}));
  BOOST_TEST(values(mp(x)) == values(F::max_pool3d(x)), tt::per_element());
  BOOST_TEST(ap(x).shape() == mg::Shape({2, 3, 4, 4, 4}));
  BOOST_TEST(mp.describe() == "MaxPool3d(kernel_size=(2, 2, 2), stride=(2, 2, 2), padding=(0, 0, 0))");
  BOOST_TEST(ap.describe() == "AvgPool3d(kernel_size=(1, 2, 2), stride=(1, 2, 2), padding=(0, 1, 1))");
  BOOST_CHECK_THROW(mg::nn::MaxPool3d({2, 0, 2}), mg::ValueError);
  BOOST_CHECK_THROW(mp(mg::zeros({2, 3, 4, 4})), mg::ShapeError);
}

BOOST_AUTO_TEST_SUITE_END()
