// F::cumsum against values worked out by hand, along each axis; its gradient
// (the reversed running sum); its errors; and autocast, which runs it in
// float32.
#include <boost/test/unit_test.hpp>

#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "../common/test_util.hpp"

namespace {

using test_util::values;

namespace mg = mixgrad;
namespace F = mixgrad::F;
using mg::DType;

}  // namespace

BOOST_AUTO_TEST_SUITE(scan)

BOOST_AUTO_TEST_CASE(cumsum_values_along_each_axis) {
  const mg::Tensor x = mg::tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {2, 3});
  BOOST_TEST(values(F::cumsum(x, 1)) == std::vector<double>({1, 3, 6, 4, 9, 15}), boost::test_tools::per_element());
  BOOST_TEST(values(F::cumsum(x, 0)) == std::vector<double>({1, 2, 3, 5, 7, 9}), boost::test_tools::per_element());
  BOOST_TEST(values(F::cumsum(x, -1)) == values(F::cumsum(x, 1)), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(cumsum_gradient_is_the_reversed_running_sum) {
  mg::Tensor x = mg::tensor({1.0, 2.0, 3.0, 4.0}, {4});
  mg::autodiff::GradManager gm;
  gm.attach(x);
  {
    auto rec = gm.record();
    gm.backward(F::cumsum(x, 0), mg::tensor({1.0, 10.0, 100.0, 1000.0}, {4}));
  }
  BOOST_TEST(values(x.grad()) == std::vector<double>({1111, 1110, 1100, 1000}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(cumsum_errors_and_autocast) {
  BOOST_CHECK_THROW(F::cumsum(mg::tensor<int64_t>({1, 2}, {2}), 0), mg::DTypeError);
  BOOST_CHECK_THROW(F::cumsum(mg::zeros({2, 3}), 2), mg::ShapeError);
  const mg::Tensor xb = mg::uniform({2, 3}, -1, 1, DType::bfloat16);
  mg::amp::autocast scope(true, DType::bfloat16);
  BOOST_TEST(F::cumsum(xb, 1).dtype() == DType::float32);
}

BOOST_AUTO_TEST_SUITE_END()
