// Layers: parameters, default initialisation, forward against values
// computed here by hand, training vs eval behaviour.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <vector>

#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace nn = mixgrad::nn;

BOOST_AUTO_TEST_SUITE(layers)

BOOST_AUTO_TEST_CASE(layer_norm_normalises_trailing_dims) {
  nn::LayerNorm ln(4);
  BOOST_TEST(ln.state_dict().keys() == std::vector<std::string>({"weight", "bias"}), boost::test_tools::per_element());
  BOOST_TEST(ln.weight().to_vector<float>() == std::vector<float>({1, 1, 1, 1}), boost::test_tools::per_element());
  auto x = mg::tensor({1.f, 2.f, 3.f, 4.f, 2.f, 2.f, 2.f, 6.f}, {2, 4});
  auto y = ln(x).to_vector<double>();
  // Row 0: mean 2.5, population variance 1.25. Row 1: mean 3, variance 3.
  for (int i = 0; i < 4; ++i) {
    BOOST_TEST(y[i] == (i + 1 - 2.5) / std::sqrt(1.25 + 1e-5), boost::test_tools::tolerance(1e-5));
  }
  BOOST_TEST(y[7] == 3.0 / std::sqrt(3.0 + 1e-5), boost::test_tools::tolerance(1e-5));
  // A learned scale and shift apply per normalised element.
  mg::Tensor w = ln.weight();
  w.data<float>()[3] = 2.f;
  mg::Tensor b = ln.bias();
  b.data<float>()[3] = 1.f;
  BOOST_TEST(ln(x).at<float>({1, 3}) == 2 * 3.0 / std::sqrt(3.0 + 1e-5) + 1, boost::test_tools::tolerance(1e-5));

  nn::LayerNorm plain({2, 4}, {.elementwise_affine = false});
  BOOST_TEST(plain.parameters().empty());
  BOOST_TEST(plain(x).shape() == mg::Shape({2, 4}));
  BOOST_CHECK_THROW(nn::LayerNorm(mg::Shape{}), mg::ValueError);
  BOOST_CHECK_THROW(nn::LayerNorm(0), mg::ValueError);
  BOOST_CHECK_THROW(nn::LayerNorm(4, {.eps = -1}), mg::ValueError);
}

BOOST_AUTO_TEST_CASE(flatten_merges_dims) {
  auto x = mg::zeros({2, 3, 4, 5});
  BOOST_TEST(nn::Flatten()(x).shape() == mg::Shape({2, 60}));
  BOOST_TEST(nn::Flatten(0)(x).shape() == mg::Shape({120}));
  BOOST_TEST(nn::Flatten(1, 2)(x).shape() == mg::Shape({2, 12, 5}));
  BOOST_TEST(nn::Flatten().describe() == "Flatten(start_dim=1, end_dim=-1)");
}

BOOST_AUTO_TEST_CASE(dropout_follows_the_training_flag) {
  mg::manual_seed(1);
  auto seq = nn::Sequential(nn::Dropout(0.25));
  auto x = mg::ones({100000});
  const auto y = seq(x).to_vector<float>();
  int zeros = 0;
  for (float v : y) {
    if (v == 0.f) {
      ++zeros;
    } else {
      BOOST_REQUIRE(std::abs(v - 1.f / 0.75f) < 1e-6f);
    }
  }
  BOOST_TEST(std::abs(zeros / 100000.0 - 0.25) < 0.01);
  seq.eval();
  BOOST_TEST(seq(x).to_vector<float>() == x.to_vector<float>(), boost::test_tools::per_element());
  BOOST_CHECK_THROW(nn::Dropout(1.0), mg::ValueError);
  BOOST_CHECK_THROW(nn::Dropout(-0.1), mg::ValueError);
  BOOST_TEST(nn::Dropout(0.5).describe() == "Dropout(p=0.5)");
}

BOOST_AUTO_TEST_SUITE_END()
