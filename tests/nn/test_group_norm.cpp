// nn::GroupNorm and nn::InstanceNorm2d: parameters and state_dict names,
// forward against values worked out by hand, the same result in train and
// eval, shape checks, and a few training steps.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <vector>

#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace nn = mixgrad::nn;

BOOST_AUTO_TEST_SUITE(group_norm_layers)

BOOST_AUTO_TEST_CASE(group_norm_parameters_and_values_by_hand) {
  nn::GroupNorm gn(2, 4);
  BOOST_TEST(gn.state_dict().keys() == std::vector<std::string>({"weight", "bias"}), boost::test_tools::per_element());
  BOOST_TEST(gn.weight().to_vector<float>() == std::vector<float>({1, 1, 1, 1}), boost::test_tools::per_element());
  BOOST_TEST(gn.bias().to_vector<float>() == std::vector<float>({0, 0, 0, 0}), boost::test_tools::per_element());
  // [1, 4, 1, 2]: group 0 = {1, 3, 5, 7} (mean 4, variance 5), group 1 =
  // {0, 0, 0, 4} (mean 1, variance 3).
  auto x = mg::tensor({1.f, 3.f, 5.f, 7.f, 0.f, 0.f, 0.f, 4.f}, {1, 4, 1, 2});
  mg::Tensor w = gn.weight(), b = gn.bias();  // handles sharing the parameters' storage
  b.data<float>()[3] = 1.f;
  w.data<float>()[3] = 2.f;
  const auto y = gn(x).to_vector<double>();
  const double s0 = std::sqrt(5 + 1e-5), s1 = std::sqrt(3 + 1e-5);
  const std::vector<double> want{-3 / s0, -1 / s0, 1 / s0, 3 / s0, -1 / s1, -1 / s1, -1 / s1 * 2 + 1, 3 / s1 * 2 + 1};
  for (int i = 0; i < 8; ++i) BOOST_TEST(y[i] == want[i], boost::test_tools::tolerance(1e-5));
  gn.eval();
  BOOST_TEST(gn(x).to_vector<double>() == y, boost::test_tools::per_element());
  BOOST_TEST(gn.describe() == "GroupNorm(2, 4, eps=1e-05, affine=true)");
}

BOOST_AUTO_TEST_CASE(group_norm_options_and_errors) {
  nn::GroupNorm plain(1, 3, {.eps = 0.5, .affine = false});
  BOOST_TEST(plain.parameters().empty());
  BOOST_TEST(!plain.weight().defined());
  // One group over {0, 2, 4}: mean 2, variance 8/3, eps 0.5.
  const auto y = plain(mg::tensor({0.f, 2.f, 4.f}, {1, 3})).to_vector<double>();
  BOOST_TEST(y[2] == 2 / std::sqrt(8.0 / 3 + 0.5), boost::test_tools::tolerance(1e-5));
  BOOST_CHECK_THROW(nn::GroupNorm(3, 4), mg::ValueError);
  BOOST_CHECK_THROW(nn::GroupNorm(0, 4), mg::ValueError);
  BOOST_CHECK_THROW(nn::GroupNorm(2, 0), mg::ValueError);
  BOOST_CHECK_THROW(nn::GroupNorm(2, 4, {.eps = -1}), mg::ValueError);
  nn::GroupNorm gn(2, 4);
  BOOST_CHECK_THROW(gn(mg::ones({2, 6, 3})), mg::ShapeError);
  BOOST_CHECK_THROW(gn(mg::ones({4})), mg::ShapeError);
  BOOST_CHECK_THROW(gn(mg::Tensor()), mg::Error);
}

BOOST_AUTO_TEST_CASE(instance_norm_2d_defaults_and_affine) {
  nn::InstanceNorm2d in(2);
  BOOST_TEST(in.parameters().empty());
  BOOST_TEST(in.state_dict().size() == 0u);
  // Channel 0 = {1, 3, 5, 7}: mean 4, variance 5; channel 1 constant: 0.
  auto x = mg::tensor({1.f, 3.f, 5.f, 7.f, 2.f, 2.f, 2.f, 2.f}, {1, 2, 2, 2});
  const auto y = in(x).to_vector<double>();
  const double s = std::sqrt(5 + 1e-5);
  const std::vector<double> want{-3 / s, -1 / s, 1 / s, 3 / s, 0, 0, 0, 0};
  for (int i = 0; i < 8; ++i) BOOST_TEST(y[i] == want[i], boost::test_tools::tolerance(1e-5));
  BOOST_TEST(in.describe() == "InstanceNorm2d(2, eps=1e-05, affine=false)");

  nn::InstanceNorm2d affine(2, {.affine = true});
  BOOST_TEST(affine.state_dict().keys() == std::vector<std::string>({"weight", "bias"}),
             boost::test_tools::per_element());
  mg::Tensor ab = affine.bias();
  ab.data<float>()[1] = 3.f;
  BOOST_TEST(affine(x).to_vector<double>()[5] == 3.0);
  BOOST_CHECK_THROW(in(mg::ones({2, 2, 4})), mg::ShapeError);
  BOOST_CHECK_THROW(in(mg::ones({1, 3, 2, 2})), mg::ShapeError);
  BOOST_CHECK_THROW(nn::InstanceNorm2d(0), mg::ValueError);
}

BOOST_AUTO_TEST_CASE(group_norm_trains_its_affine_parameters) {
  // Fit y = 2 * xhat + 1 on channel 0: the weight and bias must move there.
  mg::manual_seed(4);
  nn::GroupNorm gn(2, 4);
  mg::autodiff::GradManager gm;
  gm.attach(gn.parameters());
  mg::optim::SGD opt(gn.parameters(), {.lr = 1.0});
  const mg::Tensor x = mg::uniform({8, 4, 3, 3}, -1, 1);
  const mg::Tensor target = mg::F::add(mg::F::mul(mg::F::group_norm(x, 2), 2.0), 1.0);
  double first = 0, last = 0;
  for (int step = 0; step < 50; ++step) {
    opt.zero_grad();
    mg::Tensor loss;
    {
      auto rec = gm.record();
      loss = mg::F::mse_loss(gn(x), target);
      gm.backward(loss);
    }
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  BOOST_TEST(last < 0.01 * first);
  for (float w : gn.weight().to_vector<float>()) BOOST_TEST(w == 2.f, boost::test_tools::tolerance(0.05f));
  for (float b : gn.bias().to_vector<float>()) BOOST_TEST(b == 1.f, boost::test_tools::tolerance(0.05f));
}

BOOST_AUTO_TEST_SUITE_END()
