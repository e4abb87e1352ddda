// nn::Embedding: parameter name and shape, PyTorch's N(0, 1) initialisation,
// lookups against the weight's own rows, and its errors.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <vector>

#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace nn = mixgrad::nn;

BOOST_AUTO_TEST_SUITE(embedding_layer)

BOOST_AUTO_TEST_CASE(embedding_weight_lookup_and_init) {
  mg::manual_seed(3);
  nn::Embedding emb(1000, 64);
  BOOST_TEST(emb.state_dict().keys() == std::vector<std::string>({"weight"}), boost::test_tools::per_element());
  BOOST_TEST(emb.weight().shape() == mg::Shape({1000, 64}));
  BOOST_TEST(emb.describe() == "Embedding(1000, 64)");
  // N(0, 1): over 64000 draws the mean is within 0.02 and the std within 0.02 of 1.
  const auto w = emb.weight().to_vector<double>();
  double sum = 0, sq = 0;
  for (double v : w) sum += v, sq += v * v;
  const double mean = sum / w.size();
  BOOST_TEST(std::abs(mean) < 0.02);
  BOOST_TEST(std::abs(std::sqrt(sq / w.size() - mean * mean) - 1.0) < 0.02);

  const mg::Tensor y = emb(mg::tensor<int64_t>({999, 0, 999}, {1, 3}));
  BOOST_TEST(y.shape() == mg::Shape({1, 3, 64}));
  const auto out = y.to_vector<double>();
  for (int j = 0; j < 64; ++j) {
    BOOST_TEST(out[j] == w[999 * 64 + j]);
    BOOST_TEST(out[64 + j] == w[j]);
    BOOST_TEST(out[128 + j] == w[999 * 64 + j]);
  }
}

BOOST_AUTO_TEST_CASE(embedding_errors) {
  BOOST_CHECK_THROW(nn::Embedding(0, 4), mg::ValueError);
  BOOST_CHECK_THROW(nn::Embedding(4, 0), mg::ValueError);
  nn::Embedding emb(4, 2);
  const auto before = emb.weight().to_vector<float>();
  BOOST_CHECK_THROW(emb(mg::tensor<int64_t>({4}, {1})), mg::ValueError);
  BOOST_CHECK_THROW(emb(mg::zeros({2})), mg::DTypeError);
  BOOST_TEST(emb.weight().to_vector<float>() == before, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
