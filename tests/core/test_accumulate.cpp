// backend::accumulate (dst += src, src converted to dst's dtype), which sums
// the gradients of a tensor used twice in a backward pass: every pair of
// floating dtypes, contiguous tensors of lengths that leave block tails, and
// strided operands, against the sum computed in double and rounded once.
#include <boost/test/unit_test.hpp>

#include <vector>

#include "backend/copy.hpp"
#include "mixgrad/mixgrad.hpp"

namespace {

namespace mg = mixgrad;
using mg::DType;
using mg::Tensor;

// Values rounded to dtype dt.
std::vector<double> rounded(const std::vector<double>& v, const mg::Shape& shape, DType dt) {
  return mg::tensor(v, shape, dt).to_vector<double>();
}

// The sum as documented: src converted to the accumulation type (float32,
// or float64 for a float64 destination), added there (the exact sum in
// double, rounded once), then rounded to dst's dtype.
std::vector<double> expected(const Tensor& dst, const Tensor& src) {
  const DType acc = dst.dtype() == DType::float64 ? DType::float64 : DType::float32;
  const auto a = dst.to_vector<double>(), b = rounded(src.to_vector<double>(), src.shape(), acc);
  std::vector<double> sum(a.size());
  for (size_t i = 0; i < a.size(); ++i) sum[i] = a[i] + b[i];
  return rounded(rounded(sum, dst.shape(), acc), dst.shape(), dst.dtype());
}

}  // namespace

BOOST_AUTO_TEST_CASE(accumulate_every_floating_pair_matches_the_rounded_sum) {
  const std::vector<DType> types{DType::float32, DType::float64, DType::float16, DType::bfloat16};
  for (DType to : types)
    for (DType from : types)
      for (int64_t n : {1, 7, 255, 256, 257, 1000, 70000}) {  // 70000: split across threads
        BOOST_TEST_CONTEXT(mg::to_string(from) << " into " << mg::to_string(to) << ", n = " << n) {
          mg::manual_seed(static_cast<uint64_t>(n));
          Tensor dst = mg::uniform({n}, -2, 2, to);
          const Tensor src = mg::uniform({n}, -2, 2, from);
          const auto want = expected(dst, src);
          mg::backend::accumulate(dst, src);
          const auto got = dst.to_vector<double>();
          BOOST_TEST(got == want, boost::test_tools::per_element());
        }
      }
}

BOOST_AUTO_TEST_CASE(accumulate_strided_operands) {
  for (DType dt : {DType::float32, DType::bfloat16}) {
    mg::manual_seed(3);
    Tensor base = mg::uniform({40, 30}, -1, 1, dt);
    Tensor dst = mg::F::narrow(base, 1, 5, 20);                            // strided destination
    const Tensor src = mg::F::transpose(mg::uniform({20, 40}, -1, 1, dt), 0, 1);  // strided source
    const auto want = expected(dst, src);
    const auto untouched = mg::F::narrow(base, 1, 0, 5).to_vector<double>();
    mg::backend::accumulate(dst, src);
    BOOST_TEST(dst.to_vector<double>() == want, boost::test_tools::per_element());
    BOOST_TEST(mg::F::narrow(base, 1, 0, 5).to_vector<double>() == untouched, boost::test_tools::per_element());
  }
}
