// The valid side of the checks the misuse table exercises: arguments next to
// a rejected one still work, and the arithmetic behind a check is right.
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <limits>
#include <vector>

#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
using mg::DType;

namespace {

mg::data::TensorDataset four_samples() {
  return {mg::tensor<float>({0, 1, 2, 3}, {4, 1}), mg::tensor<int64_t>({0, 1, 2, 3}, {4})};
}

int64_t batches_seen(mg::data::DataLoader& loader, int64_t& samples) {
  int64_t n = 0;
  samples = 0;
  for (const auto& batch : loader) {
    ++n;
    samples += batch.images.shape()[0];
  }
  return n;
}

}  // namespace

BOOST_AUTO_TEST_CASE(data_loader_counts_batches_for_any_batch_size) {
  const int64_t huge = std::numeric_limits<int64_t>::max();
  struct Case {
    int64_t batch_size;
    bool drop_last;
    int64_t batches, samples;
  };
  for (const Case c : {Case{3, false, 2, 4}, Case{3, true, 1, 3}, Case{4, false, 1, 4}, Case{4, true, 1, 4},
                       Case{huge, false, 1, 4}, Case{huge, true, 0, 0}, Case{huge - 1, false, 1, 4}}) {
    BOOST_TEST_CONTEXT("batch_size " << c.batch_size << " drop_last " << c.drop_last) {
      mg::data::DataLoader loader(four_samples(), {.batch_size = c.batch_size, .drop_last = c.drop_last, .seed = 0});
      BOOST_TEST(loader.size() == c.batches);
      int64_t samples = 0;
      BOOST_TEST(batches_seen(loader, samples) == c.batches);
      BOOST_TEST(samples == c.samples);
    }
  }
}

BOOST_AUTO_TEST_CASE(arange_still_covers_ordinary_ranges) {
  BOOST_TEST(mg::arange(5.0, 0.0, -2.0).to_vector<double>() == (std::vector<double>{5, 3, 1}),
             boost::test_tools::per_element());
  BOOST_TEST(mg::arange(0.0, 1.0, 0.25).numel() == 4);
  BOOST_TEST(mg::arange(1.0, 0.0).numel() == 0);  // an empty range is not an error
  BOOST_TEST(mg::arange(int64_t{3}).to_vector<int64_t>() == (std::vector<int64_t>{0, 1, 2}),
             boost::test_tools::per_element());
  // The largest int32 values fit; one more does not.
  BOOST_TEST(mg::arange(2147483646.0, 2147483648.0, 1.0, DType::int32).to_vector<int64_t>() ==
                 (std::vector<int64_t>{2147483646, 2147483647}),
             boost::test_tools::per_element());
  BOOST_CHECK_THROW(mg::arange(2147483646.0, 2147483649.0, 1.0, DType::int32), mg::ValueError);
  // A range wider than a double can hold (end - start overflows to inf).
  BOOST_CHECK_THROW(mg::arange(-1e308, 1e308, 1e300), mg::ValueError);
}

BOOST_AUTO_TEST_CASE(batch_norm_accepts_momentum_at_both_ends) {
  const auto x = mg::tensor<float>({1, 3, 5, 7}, {2, 2, 1, 1});  // channel 0: {1, 5}, channel 1: {3, 7}
  auto mean = mg::zeros({2}), var = mg::ones({2});
  (void)mg::F::batch_norm(x, mean, var, {}, {}, {.training = true, .momentum = 1.0});
  BOOST_TEST(mean.to_vector<float>() == (std::vector<float>{3, 5}), boost::test_tools::per_element());
  BOOST_TEST(var.to_vector<float>() == (std::vector<float>{8, 8}), boost::test_tools::per_element());  // unbiased
  (void)mg::F::batch_norm(x, mean, var, {}, {}, {.training = true, .momentum = 0.0});
  BOOST_TEST(mean.to_vector<float>() == (std::vector<float>{3, 5}), boost::test_tools::per_element());
  BOOST_CHECK_THROW(mg::F::batch_norm(x, mean, var, {}, {}, {.training = true, .momentum = 1.5}), mg::ValueError);
  BOOST_TEST(mean.to_vector<float>() == (std::vector<float>{3, 5}), boost::test_tools::per_element());
  // eps = 0 is allowed (as in PyTorch); an infinite one is not.
  BOOST_CHECK_NO_THROW(mg::F::batch_norm(x, mean, var, {}, {}, {.training = false, .eps = 0.0}));
  BOOST_CHECK_THROW(mg::F::batch_norm(x, mean, var, {}, {}, {.eps = std::numeric_limits<double>::infinity()}),
                    mg::ValueError);
}

BOOST_AUTO_TEST_CASE(amp_dtype_settings_take_their_allowed_dtypes_and_autocast_uses_them) {
  struct Restore {
    ~Restore() {
      mg::amp::enabled = false;
      mg::amp::low_prec_dtype = DType::bfloat16;
      mg::amp::high_prec_dtype = DType::float32;
    }
  } restore;
  mg::amp::low_prec_dtype = DType::float16;
  mg::amp::high_prec_dtype = DType::float64;
  BOOST_CHECK_THROW(mg::amp::high_prec_dtype = DType::bfloat16, mg::DTypeError);
  BOOST_CHECK_THROW(mg::amp::low_prec_dtype = DType::int32, mg::DTypeError);
  BOOST_TEST((mg::amp::low_prec_dtype.load() == DType::float16));
  BOOST_TEST((mg::amp::high_prec_dtype.load() == DType::float64));
  mg::amp::enabled = true;
  const auto a = mg::ones({2, 3});
  BOOST_TEST((mg::F::matmul(a, mg::ones({3, 2})).dtype() == DType::float16));
  BOOST_TEST((mg::F::softmax(a).dtype() == DType::float64));
  BOOST_TEST((mg::F::cross_entropy(a, mg::tensor<int64_t>({0, 1}, {2})).dtype() == DType::float64));
}

BOOST_AUTO_TEST_CASE(adaptive_avg_pool2d_takes_an_empty_batch_but_not_an_empty_image) {
  BOOST_TEST(mg::F::adaptive_avg_pool2d(mg::zeros({0, 2, 3, 3}), 1).shape() == (mg::Shape{0, 2, 1, 1}));
  BOOST_CHECK_THROW(mg::F::adaptive_avg_pool2d(mg::zeros({1, 2, 3, 0}), 1), mg::ShapeError);
  BOOST_CHECK_THROW(mg::F::adaptive_avg_pool2d(mg::zeros({1, 2, 0, 3}), {2, 2}), mg::ShapeError);
}
