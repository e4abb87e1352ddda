// F::dropout: the fraction it zeroes and the mean it keeps (statistics over
// many elements), the same mask for the same seed on any thread count, the
// cases that return the input, errors that leave the generator where it was,
// and a backward through the forward's mask.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "../common/test_util.hpp"

namespace {

using test_util::values;

namespace mg = mixgrad;
namespace F = mixgrad::F;

}  // namespace

BOOST_AUTO_TEST_SUITE(dropout)

BOOST_AUTO_TEST_CASE(dropout_zeroes_a_fraction_p_and_preserves_the_mean) {
  const int64_t n = 200000;
  for (double p : {0.1, 0.5, 0.8}) {
    mg::manual_seed(21);
    const auto y = values(F::dropout(mg::ones({n}), p));
    int64_t zeros = 0;
    double sum = 0;
    const double kept = static_cast<float>(1.0 / (1.0 - p));
    bool values_ok = true;
    for (double v : y) {
      zeros += v == 0.0;
      sum += v;
      values_ok = values_ok && (v == 0.0 || v == kept);
    }
    BOOST_TEST(values_ok, "every element is 0 or 1 / (1 - p)");
    BOOST_TEST(std::abs(static_cast<double>(zeros) / n - p) < 0.01, "p " << p << " zero fraction " << zeros / double(n));
    BOOST_TEST(std::abs(sum / n - 1.0) < 0.03, "p " << p << " mean " << sum / n);
  }
}

BOOST_AUTO_TEST_CASE(dropout_is_reproducible_and_thread_count_independent) {
  const auto x = mg::uniform({300, 500});
  const int before = mg::num_threads();
  mg::set_num_threads(1);
  mg::manual_seed(42);
  const auto a = values(F::dropout(x, 0.4));
  const auto a_next = values(F::dropout(x, 0.4));  // the generator moved on: another mask
  mg::set_num_threads(2);
  mg::manual_seed(42);
  const auto b = values(F::dropout(x, 0.4));
  mg::set_num_threads(before);
  BOOST_TEST(a == b, boost::test_tools::per_element());
  BOOST_TEST((a != a_next));
}

BOOST_AUTO_TEST_CASE(dropout_identity_cases_and_errors) {
  const auto x = mg::uniform({3, 4});
  BOOST_TEST(F::dropout(x, 0.5, false).id() == x.id());
  BOOST_TEST(F::dropout(x, 0.0).id() == x.id());
  // An invalid p throws before drawing: the generator is where it was.
  mg::manual_seed(3);
  BOOST_CHECK_THROW(F::dropout(x, 1.0), mg::ValueError);
  BOOST_CHECK_THROW(F::dropout(x, -0.1), mg::ValueError);
  BOOST_CHECK_THROW(F::dropout(x, 1.5, false), mg::ValueError);
  const auto after_errors = values(mg::uniform({8}));
  mg::manual_seed(3);
  BOOST_TEST(after_errors == values(mg::uniform({8})), boost::test_tools::per_element());
  BOOST_CHECK_THROW(F::dropout(mg::zeros({2}, mg::DType::int64), 0.5), mg::DTypeError);
}

BOOST_AUTO_TEST_CASE(dropout_backward_uses_the_forward_mask) {
  mg::Tensor x = mg::ones({64, 33});  // not a multiple of 4 elements per row
  mg::autodiff::GradManager gm;
  gm.attach(x);
  mg::Tensor y;
  {
    auto rec = gm.record();
    y = F::dropout(F::transpose(x, 0, 1), 0.3);  // a strided input
    gm.backward(y);  // dy = ones: dx = mask / (1 - p), which is y itself, transposed back
  }
  BOOST_TEST_REQUIRE(x.grad().defined());
  BOOST_TEST(values(x.grad()) == values(F::transpose(y, 0, 1)), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
