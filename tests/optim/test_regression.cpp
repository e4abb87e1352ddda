// Optimizers driven by a GradManager on a tiny linear regression.
#include <boost/test/unit_test.hpp>

#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;

namespace {

// Trains y = x·w* + b* with `opt` for `steps` full-batch steps; returns
// (first loss, last loss).
template <class Opt, class Options>
std::pair<double, double> fit(const Options& options, int steps) {
  mg::manual_seed(3);
  const auto x = mg::normal({64, 3});
  const auto y = mg::F::linear(x, mg::tensor({1.5f, -2.f, 0.5f}, {1, 3}), mg::tensor({0.3f}, {1}));
  mg::nn::Linear model(3, 1);
  mg::autodiff::GradManager gm;
  gm.attach(model.parameters());
  Opt opt(model.parameters(), options);
  double first = 0, last = 0;
  for (int s = 0; s < steps; ++s) {
    mg::Tensor loss;
    {
      auto recording = gm.record();
      loss = mg::F::mse_loss(model(x), y);
      gm.backward(loss);
    }
    opt.step().clear_grad();
    (s == 0 ? first : last) = loss.item<double>();
  }
  return {first, last};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(regression)

BOOST_AUTO_TEST_CASE(every_optimizer_decreases_the_loss) {
  const auto [s0, s1] = fit<mg::optim::SGD>(mg::optim::SGDOptions{.lr = 0.1, .momentum = 0.5}, 60);
  BOOST_TEST(s1 < 1e-3 * s0);
  const auto [a0, a1] = fit<mg::optim::Adam>(mg::optim::AdamOptions{.lr = 0.1}, 150);
  BOOST_TEST(a1 < 1e-2 * a0);
  const auto [w0, w1] = fit<mg::optim::AdamW>(mg::optim::AdamWOptions{.lr = 0.1, .weight_decay = 1e-4}, 150);
  BOOST_TEST(w1 < 1e-2 * w0);
}

BOOST_AUTO_TEST_SUITE_END()
