// F::reshape returns a view whenever strides can show the input's elements
// in the new shape, as PyTorch's reshape does, and copies only otherwise:
// splitting a dim of unit stride (the heads of a narrowed [N, L, 3E]
// projection), merging dims that follow each other in memory, adding or
// dropping extent-1 dims. The values and gradients of these cases are in
// the op registry (cases_shape.cpp); here, which calls share storage.
#include <boost/test/unit_test.hpp>

#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "../common/test_util.hpp"

namespace {

namespace mg = mixgrad;
namespace F = mixgrad::F;
using test_util::values;

mg::Tensor iota(const mg::Shape& shape) {
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i);
  return mg::tensor(v, shape);
}

// Whether b is a view on a's storage.
bool shares_storage(const mg::Tensor& a, const mg::Tensor& b) {
  return a.impl()->storage == b.impl()->storage;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(reshape_views)

BOOST_AUTO_TEST_CASE(splitting_a_narrowed_last_dim_is_a_view) {
  const mg::Tensor qkv = iota({2, 3, 12});           // [N, L, 3E], E = 4
  const mg::Tensor k = F::narrow(qkv, 2, 4, 4);      // [2, 3, 4], rows 12 apart
  const mg::Tensor heads = F::reshape(k, {2, 3, 2, 2});  // [N, L, H, E/H]
  BOOST_TEST(shares_storage(qkv, heads));
  BOOST_TEST(heads.strides() == mg::Shape({36, 12, 2, 1}));
  BOOST_TEST(values(heads) == values(F::reshape(k.contiguous(), {2, 3, 2, 2})), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(merging_dims_that_follow_each_other_is_a_view) {
  const mg::Tensor x = iota({4, 3, 5});
  const mg::Tensor part = F::narrow(x, 0, 1, 2);  // [2, 3, 5]: dims 1 and 2 still follow each other
  const mg::Tensor m = F::reshape(part, {2, 15});
  BOOST_TEST(shares_storage(x, m));
  BOOST_TEST(m.strides() == mg::Shape({15, 1}));
  BOOST_TEST(values(m) == values(F::reshape(part.contiguous(), {2, 15})), boost::test_tools::per_element());
  // Unit dims come and go as views too, whatever the input's strides.
  const mg::Tensor u = F::reshape(F::narrow(x, 2, 1, 3), {4, 1, 3, 3, 1});
  BOOST_TEST(shares_storage(x, u));
  BOOST_TEST(values(u) == values(F::narrow(x, 2, 1, 3)), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_merge_across_a_gap_or_a_transpose_copies) {
  const mg::Tensor x = iota({4, 3, 5});
  const mg::Tensor part = F::narrow(x, 2, 0, 4);  // rows of 4 values, 5 apart: no stride merges them
  const mg::Tensor flat = F::reshape(part, {12, 4});
  BOOST_TEST(shares_storage(x, flat));            // [4*3, 4]: dims 0 and 1 follow each other
  const mg::Tensor all = F::reshape(part, {48});
  BOOST_TEST(!shares_storage(x, all));
  BOOST_TEST(all.is_contiguous());
  BOOST_TEST(values(all) == values(part), boost::test_tools::per_element());
  const mg::Tensor t = F::reshape(F::transpose(x, 1, 2), {4, 15});
  BOOST_TEST(!shares_storage(x, t));
  BOOST_TEST(values(t) == values(F::transpose(x, 1, 2)), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
