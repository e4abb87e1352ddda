// topk, sort and argsort against values worked out by hand: ties in input
// order, NaN as the largest value, k = 0, smallest-first, the gradient
// scattered to the picked positions, and typed errors that change nothing.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "../common/test_util.hpp"

namespace {

using test_util::values;
using test_util::message_has;

namespace mg = mixgrad;
namespace F = mixgrad::F;
using mg::DType;

std::vector<int64_t> ints(const mg::Tensor& t) { return t.to_vector<int64_t>(); }

}  // namespace

BOOST_AUTO_TEST_SUITE(sorting)

BOOST_AUTO_TEST_CASE(sort_is_stable_both_ways) {
  mg::Tensor x = mg::tensor({2.f, 1.f, 2.f, 0.f, 1.f}, {5});
  auto [asc, ai] = F::sort(x);
  BOOST_TEST(values(asc) == (std::vector<double>{0, 1, 1, 2, 2}), boost::test_tools::per_element());
  BOOST_TEST(ints(ai) == (std::vector<int64_t>{3, 1, 4, 0, 2}), boost::test_tools::per_element());
  auto [desc, di] = F::sort(x, 0, true);
  BOOST_TEST(values(desc) == (std::vector<double>{2, 2, 1, 1, 0}), boost::test_tools::per_element());
  BOOST_TEST(ints(di) == (std::vector<int64_t>{0, 2, 1, 4, 3}), boost::test_tools::per_element());
  BOOST_TEST(ints(F::argsort(x, -1, true)) == (std::vector<int64_t>{0, 2, 1, 4, 3}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(topk_picks_largest_or_smallest_along_an_axis) {
  // [[3, 1, 4], [1, 5, 9]] along axis 0 and axis 1.
  mg::Tensor x = mg::tensor({3.f, 1.f, 4.f, 1.f, 5.f, 9.f}, {2, 3});
  auto [v, i] = F::topk(x, 2);
  BOOST_TEST(v.shape() == (mg::Shape{2, 2}));
  BOOST_TEST(values(v) == (std::vector<double>{4, 3, 9, 5}), boost::test_tools::per_element());
  BOOST_TEST(ints(i) == (std::vector<int64_t>{2, 0, 2, 1}), boost::test_tools::per_element());
  BOOST_TEST(i.dtype() == DType::int64);
  auto [s, si] = F::topk(x, 1, 0, /*largest=*/false);
  BOOST_TEST(s.shape() == (mg::Shape{1, 3}));
  BOOST_TEST(values(s) == (std::vector<double>{1, 1, 4}), boost::test_tools::per_element());
  BOOST_TEST(ints(si) == (std::vector<int64_t>{1, 0, 0}), boost::test_tools::per_element());
  // Ties: the earlier position first.
  auto [t, ti] = F::topk(mg::tensor({5.f, 7.f, 7.f, 5.f}, {4}), 3);
  BOOST_TEST(values(t) == (std::vector<double>{7, 7, 5}), boost::test_tools::per_element());
  BOOST_TEST(ints(ti) == (std::vector<int64_t>{1, 2, 0}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(nan_counts_as_the_largest) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  mg::Tensor x = mg::tensor({1.f, nan, 3.f, nan, 2.f}, {5});
  auto [v, i] = F::topk(x, 3);
  BOOST_TEST(ints(i) == (std::vector<int64_t>{1, 3, 2}), boost::test_tools::per_element());
  const auto vv = values(v);
  BOOST_TEST((std::isnan(vv[0]) && std::isnan(vv[1]) && vv[2] == 3.0));
  auto [a, ai] = F::sort(x);
  BOOST_TEST(ints(ai) == (std::vector<int64_t>{0, 4, 2, 1, 3}), boost::test_tools::per_element());
  BOOST_TEST(values(a)[2] == 3.0);
  auto [m, mi] = F::topk(x, 1, -1, false);
  BOOST_TEST(ints(mi) == (std::vector<int64_t>{0}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(k_zero_gives_empty_results) {
  auto [v, i] = F::topk(mg::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3}), 0);
  BOOST_TEST(v.shape() == (mg::Shape{2, 0}));
  BOOST_TEST(i.shape() == (mg::Shape{2, 0}));
  BOOST_TEST(i.dtype() == DType::int64);
}

BOOST_AUTO_TEST_CASE(sixteen_bit_and_integer_inputs_keep_their_dtype) {
  auto [b, bi] = F::topk(mg::tensor({0.5f, -2.f, 3.f}, {3}, DType::bfloat16), 2);
  BOOST_TEST(b.dtype() == DType::bfloat16);
  BOOST_TEST(values(b) == (std::vector<double>{3, 0.5}), boost::test_tools::per_element());
  BOOST_TEST(ints(bi) == (std::vector<int64_t>{2, 0}), boost::test_tools::per_element());
  auto [n, ni] = F::sort(mg::tensor<int64_t>({4, -1, 4, 2}, {4}));
  BOOST_TEST(n.dtype() == DType::int64);
  BOOST_TEST(ints(n) == (std::vector<int64_t>{-1, 2, 4, 4}), boost::test_tools::per_element());
  BOOST_TEST(ints(ni) == (std::vector<int64_t>{1, 3, 0, 2}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(gradient_goes_to_the_picked_positions) {
  mg::Tensor x = mg::tensor({3.f, 1.f, 4.f, 1.f, 5.f, 9.f}, {2, 3});
  mg::autodiff::GradManager gm;
  gm.attach(x);
  {
    auto rec = gm.record();
    auto [v, i] = F::topk(x, 2);
    // loss = sum(v * [[1, 10], [100, 1000]])
    gm.backward(F::sum(F::mul(v, mg::tensor({1.f, 10.f, 100.f, 1000.f}, {2, 2}))));
  }
  BOOST_TEST(values(x.grad()) == (std::vector<double>{10, 0, 1, 0, 1000, 100}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(bad_k_or_axis_is_a_typed_error_naming_the_op) {
  mg::Tensor x = mg::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  const std::vector<double> before = values(x);
  BOOST_CHECK_EXCEPTION(F::topk(x, 4), mg::ValueError,
                        [](const mg::Error& e) { return message_has(e, {"topk", "k = 4", "float32[2, 3]"}); });
  BOOST_CHECK_EXCEPTION(F::topk(x, -1), mg::ValueError, [](const mg::Error& e) { return message_has(e, {"topk"}); });
  BOOST_CHECK_EXCEPTION(F::topk(x, 1, 2), mg::ShapeError, [](const mg::Error& e) { return message_has(e, {"topk"}); });
  BOOST_CHECK_EXCEPTION(F::sort(x, -3), mg::ShapeError, [](const mg::Error& e) { return message_has(e, {"sort"}); });
  BOOST_CHECK_THROW(F::sort(mg::Tensor()), mg::Error);
  BOOST_TEST(values(x) == before, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
