// F::index_put against values worked out by hand: one index along dimension
// 0, a tuple of broadcast indices, accumulate, repeated positions (last
// wins without accumulate), its gradients, its errors (typed, naming the op,
// the index and the shape, changing nothing) and its autocast promotion.
#include <boost/test/unit_test.hpp>

#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "../common/test_util.hpp"

namespace {

using test_util::message_has;
using test_util::values;

namespace mg = mixgrad;
namespace F = mixgrad::F;
using mg::DType;

mg::Tensor ids(std::vector<int64_t> v, mg::Shape s) { return mg::tensor<int64_t>(v, s); }

}  // namespace

BOOST_AUTO_TEST_SUITE(index_put)

BOOST_AUTO_TEST_CASE(rows_are_overwritten_out_of_place) {
  const mg::Tensor x = mg::tensor({0.f, 1.f, 2.f, 3.f, 4.f, 5.f}, {3, 2});
  const mg::Tensor y = F::index_put(x, {ids({2, -3}, {2})}, mg::tensor({7.f, 8.f, 9.f, 10.f}, {2, 2}));
  BOOST_TEST(values(y) == std::vector<double>({9, 10, 2, 3, 7, 8}), boost::test_tools::per_element());
  BOOST_TEST(values(x) == std::vector<double>({0, 1, 2, 3, 4, 5}), boost::test_tools::per_element());
  // A scalar value broadcasts over the picked rows.
  const mg::Tensor z = F::index_put(x, {ids({1}, {1})}, mg::tensor({-1.f}, {}));
  BOOST_TEST(values(z) == std::vector<double>({0, 1, -1, -1, 4, 5}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_tuple_of_indices_broadcasts_together) {
  // x[r, c] = v with r [2, 1] and c [3] broadcast to [2, 3].
  const mg::Tensor x = mg::zeros({3, 4});
  const mg::Tensor y =
      F::index_put(x, {ids({0, 2}, {2, 1}), ids({1, 3, 0}, {3})}, mg::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3}));
  BOOST_TEST(values(y) == std::vector<double>({3, 1, 0, 2, 0, 0, 0, 0, 6, 4, 0, 5}), boost::test_tools::per_element());
  // Two indices into a 3-d tensor: whole trailing rows.
  const mg::Tensor x3 = mg::zeros({2, 2, 2});
  const mg::Tensor y3 = F::index_put(x3, {ids({1}, {1}), ids({0}, {1})}, mg::tensor({5.f, 6.f}, {2}));
  BOOST_TEST(values(y3) == std::vector<double>({0, 0, 0, 0, 5, 6, 0, 0}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(repeated_positions_last_wins_or_accumulate) {
  const mg::Tensor x = mg::tensor({1.0, 1.0, 1.0}, {3});
  const mg::Tensor v = mg::tensor({10.0, 20.0, 30.0, 40.0}, {4});
  const mg::Tensor idx = ids({2, 0, 2, 2}, {4});
  BOOST_TEST(values(F::index_put(x, {idx}, v)) == std::vector<double>({20, 1, 40}), boost::test_tools::per_element());
  BOOST_TEST(values(F::index_put(x, {idx}, v, {.accumulate = true})) == std::vector<double>({21, 1, 81}),
             boost::test_tools::per_element());
  // Integer data accumulates too.
  const mg::Tensor xi = mg::tensor<int32_t>({0, 0}, {2});
  BOOST_TEST(values(F::index_put(xi, {ids({1, 1}, {2})}, mg::tensor<int32_t>({3, 4}, {2}), {.accumulate = true})) ==
                 std::vector<double>({0, 7}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(gradients_zero_the_written_positions_and_gather_values) {
  mg::Tensor x = mg::tensor({0.0, 1.0, 2.0, 3.0, 4.0, 5.0}, {3, 2});
  mg::Tensor v = mg::tensor({7.0, 8.0}, {2});  // broadcast over the two picked rows
  mg::autodiff::GradManager gm;
  gm.attach({x, v});
  {
    auto rec = gm.record();
    const mg::Tensor y = F::index_put(x, {ids({0, 2}, {2})}, v);
    gm.backward(F::sum(F::mul(y, mg::tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {3, 2}))));
  }
  BOOST_TEST(values(x.grad()) == std::vector<double>({0, 0, 3, 4, 0, 0}), boost::test_tools::per_element());
  BOOST_TEST(values(v.grad()) == std::vector<double>({6, 8}), boost::test_tools::per_element());

  mg::Tensor a = mg::tensor({0.0, 1.0, 2.0}, {3});
  mg::Tensor b = mg::tensor({1.0, 1.0}, {2});
  mg::autodiff::GradManager gm2;
  gm2.attach({a, b});
  {
    auto rec = gm2.record();
    const mg::Tensor y = F::index_put(a, {ids({1, 1}, {2})}, b, {.accumulate = true});
    gm2.backward(F::sum(F::mul(y, mg::tensor({1.0, 2.0, 3.0}, {3}))));
  }
  BOOST_TEST(values(a.grad()) == std::vector<double>({1, 2, 3}), boost::test_tools::per_element());
  BOOST_TEST(values(b.grad()) == std::vector<double>({2, 2}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(bad_input_is_a_typed_error_that_changes_nothing) {
  mg::Tensor x = mg::tensor({0.f, 1.f, 2.f, 3.f}, {2, 2});
  mg::autodiff::GradManager gm;
  gm.attach(x);
  {
    auto rec = gm.record();
    try {
      F::index_put(x, {ids({0, 5}, {2})}, mg::zeros({2, 2}));
      BOOST_FAIL("expected an error");
    } catch (const mg::ValueError& e) {
      BOOST_TEST(message_has(e, {"index_put", "index 5", "float32[2, 2]"}), e.what());
    }
    try {
      F::index_put(x, {ids({0}, {1}), ids({-3}, {1})}, mg::zeros({1}));
      BOOST_FAIL("expected an error");
    } catch (const mg::ValueError& e) {
      BOOST_TEST(message_has(e, {"index_put", "index -3", "dimension 1", "float32[2, 2]"}), e.what());
    }
    BOOST_CHECK_THROW(F::index_put(x, {}, mg::zeros({2})), mg::ShapeError);
    BOOST_CHECK_THROW(F::index_put(x, {ids({0}, {1}), ids({0}, {1}), ids({0}, {1})}, mg::zeros({1})), mg::ShapeError);
    BOOST_CHECK_THROW(F::index_put(x, {ids({0, 1}, {2}), ids({0, 1, 1}, {3})}, mg::zeros({1})), mg::ShapeError);
    BOOST_CHECK_THROW(F::index_put(x, {ids({0, 1}, {2})}, mg::zeros({3})), mg::ShapeError);
    BOOST_CHECK_THROW(F::index_put(x, {ids({0, 1}, {2})}, mg::zeros({2, 2}, DType::float64)), mg::DTypeError);
    BOOST_CHECK_THROW(F::index_put(x, {mg::tensor<int32_t>({0}, {1})}, mg::zeros({2})), mg::DTypeError);
    gm.backward(F::mul(x, 2.0));  // nothing was recorded by the failed calls
  }
  BOOST_TEST(values(x) == std::vector<double>({0, 1, 2, 3}), boost::test_tools::per_element());
  BOOST_TEST(values(x.grad()) == std::vector<double>({2, 2, 2, 2}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(autocast_promotes_to_the_wider_dtype) {
  const mg::Tensor x = mg::zeros({3, 2});
  const mg::Tensor v = mg::ones({1, 2}, DType::bfloat16);
  BOOST_CHECK_THROW(F::index_put(x, {ids({1}, {1})}, v), mg::DTypeError);  // outside autocast: one dtype
  mg::amp::autocast scope(true, DType::bfloat16);
  const mg::Tensor y = F::index_put(x, {ids({1}, {1})}, v);
  BOOST_TEST(y.dtype() == DType::float32);
  BOOST_TEST(values(y) == std::vector<double>({0, 0, 1, 1, 0, 0}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
