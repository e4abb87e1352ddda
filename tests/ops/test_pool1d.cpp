// F::max_pool1d and F::avg_pool1d on hand-worked sequences, on oneDNN and on
// the built-in kernels: values, the max-pool gradient's routing, padding that
// never wins (max) and is not counted (avg), and errors naming the op. The
// registry (cases_nn.cpp) checks their gradients in float64.
#include <boost/test/unit_test.hpp>

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
}  // namespace

BOOST_AUTO_TEST_SUITE(pool1d)

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

BOOST_AUTO_TEST_SUITE_END()
