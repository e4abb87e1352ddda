// The user code of the design, end to end on a tiny CNN: Sequential,
// GradManager, SGD, train/eval, state dicts.
#include <boost/test/unit_test.hpp>

#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace nn = mixgrad::nn;

namespace {

nn::Sequential tiny_cnn() {
  return nn::Sequential(nn::Conv2d(1, 4, 3, {.padding = 1}), nn::BatchNorm2d(4), nn::ReLU(), nn::MaxPool2d(2),
                        nn::Flatten(), nn::Linear(4 * 4 * 4, 16), nn::ReLU(), nn::Linear(16, 3));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(training)

BOOST_AUTO_TEST_CASE(names_follow_pytorch) {
  auto net = tiny_cnn();
  const std::vector<std::string> want = {"0.weight", "0.bias",         "1.weight",    "1.bias",   "1.running_mean",
                                         "1.running_var", "5.weight", "5.bias", "7.weight", "7.bias"};
  BOOST_TEST(net.state_dict().keys() == want, boost::test_tools::per_element());
  BOOST_TEST(net.parameters().size() == 8u);
}

BOOST_AUTO_TEST_CASE(a_few_steps_fit_a_small_batch) {
  mg::manual_seed(0);
  auto net = tiny_cnn();
  mg::autodiff::GradManager gm;
  gm.attach(net.parameters());
  mg::optim::SGD opt(net.parameters(), {.lr = 0.05, .momentum = 0.9});
  auto x = mg::normal({12, 1, 8, 8});
  auto y = mg::tensor(std::vector<int64_t>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}, {12});

  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    mg::Tensor loss;
    {
      auto recording = gm.record();
      loss = mg::F::cross_entropy(net(x), y);
      gm.backward(loss);
    }
    for (const auto& [name, p] : net.named_parameters())
      BOOST_REQUIRE_MESSAGE(p.grad().defined() && p.grad().shape() == p.shape(), name << " has no gradient");
    opt.step().clear_grad();
    (step == 0 ? first : last) = loss.item<double>();
  }
  BOOST_TEST(last < 0.2 * first);

  // Eval mode is deterministic and uses the running statistics; a reload
  // into a fresh network reproduces the outputs.
  net.eval();
  const auto out = net(x).to_vector<float>();
  auto copy = tiny_cnn();
  copy.load_state_dict(net.state_dict());
  copy.eval();
  BOOST_TEST(copy(x).to_vector<float>() == out, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
