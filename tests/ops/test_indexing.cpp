// The indexing ops (embedding, index_select, gather, scatter_add) against
// values worked out by hand, their errors (typed, naming the op, the index
// and the extent, and changing nothing), and their autocast behaviour.
// index_put has its own file, test_index_put.cpp.
#include <boost/test/unit_test.hpp>

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

mg::Tensor ids(std::vector<int64_t> v, mg::Shape s) { return mg::tensor<int64_t>(v, s); }

}  // namespace

BOOST_AUTO_TEST_SUITE(indexing)

BOOST_AUTO_TEST_CASE(embedding_picks_rows_and_adds_gradients_of_repeated_ids) {
  mg::Tensor w = mg::tensor({0.f, 1.f, 10.f, 11.f, 20.f, 21.f}, {3, 2});
  mg::autodiff::GradManager gm;
  gm.attach(w);
  mg::Tensor y;
  {
    auto rec = gm.record();
    y = F::embedding(w, ids({2, 0, 2, 2}, {2, 2}));
    gm.backward(y);
  }
  BOOST_TEST(y.shape() == mg::Shape({2, 2, 2}));
  BOOST_TEST(values(y) == std::vector<double>({20, 21, 0, 1, 20, 21, 20, 21}), boost::test_tools::per_element());
  // Row 2 was picked three times, row 1 never.
  BOOST_TEST(values(w.grad()) == std::vector<double>({1, 1, 0, 0, 3, 3}), boost::test_tools::per_element());
}

// Large enough for the kernel's threaded path (threads own row ranges).
BOOST_AUTO_TEST_CASE(embedding_gradient_counts_ids_on_a_large_batch) {
  const int64_t rows = 1000, dim = 16, n = 8192;
  std::vector<int64_t> v(n);
  std::vector<double> count(rows, 0.0);
  for (int64_t k = 0; k < n; ++k) {
    v[k] = (k * 7919 + k / 3) % rows;
    if (k % 5 == 0) v[k] = 17;  // one id very often
    count[v[k]] += 1;
  }
  mg::Tensor w = mg::zeros({rows, dim});
  mg::autodiff::GradManager gm;
  gm.attach(w);
  {
    auto rec = gm.record();
    gm.backward(F::embedding(w, ids(v, {n})));
  }
  const auto g = values(w.grad());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < dim; ++j) BOOST_TEST_REQUIRE(g[r * dim + j] == count[r], "row " << r);
}

BOOST_AUTO_TEST_CASE(index_select_gather_scatter_add_values) {
  const mg::Tensor x = mg::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  BOOST_TEST(values(F::index_select(x, 1, ids({2, 2, 0}, {3}))) == std::vector<double>({3, 3, 1, 6, 6, 4}),
             boost::test_tools::per_element());
  BOOST_TEST(values(F::index_select(x, 0, ids({1}, {1}))) == std::vector<double>({4, 5, 6}),
             boost::test_tools::per_element());
  // out[i][j] = x[i][index[i][j]]
  BOOST_TEST(values(F::gather(x, 1, ids({2, 0, 1, 1}, {2, 2}))) == std::vector<double>({3, 1, 5, 5}),
             boost::test_tools::per_element());
  // out[i][j] = x[index[i][j]][j], index smaller than x along dim 1
  BOOST_TEST(values(F::gather(x, 0, ids({1, 0}, {1, 2}))) == std::vector<double>({4, 2}),
             boost::test_tools::per_element());
  // x[i][index[i][j]] += src[i][j], repeated indices add up
  const mg::Tensor src = mg::tensor({10.f, 20.f, 30.f, 40.f}, {2, 2});
  BOOST_TEST(values(F::scatter_add(x, 1, ids({0, 0, 2, 1}, {2, 2}), src)) ==
                 std::vector<double>({31, 2, 3, 4, 45, 36}),
             boost::test_tools::per_element());
  BOOST_TEST(values(x) == std::vector<double>({1, 2, 3, 4, 5, 6}), boost::test_tools::per_element());  // not in place
}

BOOST_AUTO_TEST_CASE(bad_indices_are_typed_errors_that_change_nothing) {
  mg::Tensor w = mg::tensor({0.f, 1.f, 10.f, 11.f}, {2, 2});
  mg::autodiff::GradManager gm;
  gm.attach(w);
  {
    auto rec = gm.record();
    try {
      F::embedding(w, ids({0, 7}, {2}));
      BOOST_FAIL("expected an error");
    } catch (const mg::ValueError& e) {
      BOOST_TEST(message_has(e, {"embedding", "index 7", "2 rows"}), e.what());
    }
    try {
      F::index_select(w, 1, ids({-1}, {1}));
      BOOST_FAIL("expected an error");
    } catch (const mg::ValueError& e) {
      BOOST_TEST(message_has(e, {"index_select", "index -1", "float32[2, 2]"}), e.what());
    }
    try {
      F::gather(w, 0, ids({0, 2}, {1, 2}));
      BOOST_FAIL("expected an error");
    } catch (const mg::ValueError& e) {
      BOOST_TEST(message_has(e, {"gather", "index 2"}), e.what());
    }
    BOOST_CHECK_THROW(F::embedding(w, mg::tensor<int32_t>({0}, {1})), mg::DTypeError);
    BOOST_CHECK_THROW(F::embedding(mg::zeros({4}), ids({0}, {1})), mg::ShapeError);
    BOOST_CHECK_THROW(F::index_select(w, 0, ids({0, 1}, {1, 2})), mg::ShapeError);
    BOOST_CHECK_THROW(F::index_select(w, 2, ids({0}, {1})), mg::ShapeError);
    BOOST_CHECK_THROW(F::gather(w, 1, ids({0, 0, 0}, {3, 1})), mg::ShapeError);
    BOOST_CHECK_THROW(F::gather(w, 1, ids({0}, {1})), mg::ShapeError);
    BOOST_CHECK_THROW(F::scatter_add(w, 0, ids({0, 1}, {1, 2}), mg::zeros({1, 2}, DType::float64)), mg::DTypeError);
    BOOST_CHECK_THROW(F::scatter_add(w, 0, ids({0, 1}, {1, 2}), mg::zeros({1, 1})), mg::ShapeError);
    // Nothing was recorded: backward of an untouched output reaches no input.
    gm.backward(F::mul(w, 2.0));
  }
  BOOST_TEST(values(w) == std::vector<double>({0, 1, 10, 11}), boost::test_tools::per_element());
  BOOST_TEST(values(w.grad()) == std::vector<double>({2, 2, 2, 2}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(autocast_keeps_lookups_and_promotes_scatter_add) {
  const mg::Tensor w = mg::uniform({4, 3}, -1, 1);
  const mg::Tensor xb = mg::uniform({2, 3}, -1, 1, DType::bfloat16);
  mg::amp::autocast scope(true, DType::bfloat16);
  BOOST_TEST(F::embedding(w, ids({1, 3}, {2})).dtype() == DType::float32);
  BOOST_TEST(F::index_select(xb, 0, ids({1}, {1})).dtype() == DType::bfloat16);
  BOOST_TEST(F::gather(xb, 1, ids({0, 2}, {1, 2})).dtype() == DType::bfloat16);
  // scatter_add joins a float32 input and a bfloat16 src in float32.
  BOOST_TEST(F::scatter_add(w, 0, ids({3, 0}, {1, 2}), mg::ones({1, 2}, DType::bfloat16)).dtype() == DType::float32);
}

BOOST_AUTO_TEST_SUITE_END()
