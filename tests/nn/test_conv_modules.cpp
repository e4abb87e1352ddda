// nn::Conv1d and nn::ConvTranspose2d: parameter shapes and PyTorch's default
// initialisation bounds, output shapes, constructor and input checks, and a
// small encoder-decoder (Conv2d down, ConvTranspose2d up) that learns.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace nn = mixgrad::nn;
namespace F = mixgrad::F;

namespace {
double max_abs(const mg::Tensor& t) {
  double m = 0;
  for (double v : t.to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(conv_modules)

BOOST_AUTO_TEST_CASE(conv1d_module) {
  mg::manual_seed(1);
  nn::Conv1d conv(4, 6, 3, {.stride = 2, .padding = 1, .groups = 2});
  BOOST_TEST(conv.weight().shape() == mg::Shape({6, 2, 3}));
  BOOST_TEST(conv.bias().shape() == mg::Shape({6}));
  const double bound = 1.0 / std::sqrt(2.0 * 3.0);  // fan_in = in / groups * k
  BOOST_TEST(max_abs(conv.weight()) <= bound);
  BOOST_TEST(max_abs(conv.bias()) <= bound);
  BOOST_TEST(max_abs(conv.weight()) > bound / 2);  // drawn, not left at zero
  const mg::Tensor x = mg::uniform({2, 4, 9});
  const mg::Tensor y = conv(x);
  BOOST_TEST(y.shape() == mg::Shape({2, 6, 5}));
  const auto want = F::conv1d(x, conv.weight(), conv.bias(), {.stride = 2, .padding = 1, .groups = 2});
  BOOST_TEST(y.to_vector<double>() == want.to_vector<double>(), boost::test_tools::per_element());
  BOOST_TEST(conv.describe() == "Conv1d(4, 6, kernel_size=3, stride=2, padding=1, groups=2)");
  BOOST_TEST(nn::Conv1d(2, 3, 1, {.bias = false}).parameters().size() == 1u);
  BOOST_CHECK_THROW(conv(mg::zeros({2, 3, 9})), mg::ShapeError);
  BOOST_CHECK_THROW(conv(mg::zeros({2, 4, 9, 1})), mg::ShapeError);
  BOOST_CHECK_THROW(nn::Conv1d(3, 6, 3, {.groups = 2}), mg::ValueError);
  BOOST_CHECK_THROW(nn::Conv1d(3, 6, 0), mg::ValueError);
}

BOOST_AUTO_TEST_CASE(conv_transpose2d_module) {
  mg::manual_seed(2);
  nn::ConvTranspose2d up(8, 4, 4, {.stride = 2, .padding = 1});
  // PyTorch's layout [in, out / groups, kh, kw]; fan_in = out / groups * kh * kw.
  BOOST_TEST(up.weight().shape() == mg::Shape({8, 4, 4, 4}));
  const double bound = 1.0 / std::sqrt(4.0 * 16.0);
  BOOST_TEST(max_abs(up.weight()) <= bound);
  BOOST_TEST(max_abs(up.bias()) <= bound);
  const mg::Tensor y = up(mg::uniform({2, 8, 5, 6}));
  BOOST_TEST(y.shape() == mg::Shape({2, 4, 10, 12}));  // doubles H and W
  nn::ConvTranspose2d odd(2, 2, 3, {.stride = 2, .padding = 1, .output_padding = 1, .groups = 2, .bias = false});
  BOOST_TEST(odd.weight().shape() == mg::Shape({2, 1, 3, 3}));
  BOOST_TEST(odd(mg::zeros({1, 2, 4, 4})).shape() == mg::Shape({1, 2, 8, 8}));
  BOOST_TEST(odd.describe() ==
             "ConvTranspose2d(2, 2, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), output_padding=(1, 1), "
             "groups=2, bias=false)");
  BOOST_CHECK_THROW(up(mg::zeros({2, 4, 5, 5})), mg::ShapeError);
  BOOST_CHECK_THROW(nn::ConvTranspose2d(2, 2, 3, {.stride = 2, .output_padding = 2}), mg::ValueError);
  BOOST_CHECK_THROW(nn::ConvTranspose2d(3, 4, 3, {.groups = 2}), mg::ValueError);
}

// The three modules share one implementation of their checks and describe():
// each message still names its own module and geometry, Conv1d's extents as
// integers and the 2-d modules' as pairs.
BOOST_AUTO_TEST_CASE(conv_module_messages_name_their_module) {
  auto message = [](auto&& make) -> std::string {
    try {
      make();
    } catch (const mg::Error& e) {
      return e.what();
    }
    return "no error";
  };
  BOOST_TEST(message([] { nn::Conv1d(3, 6, 3, {.groups = 2}); }) ==
             "Conv1d(3, 6, kernel_size=3): groups = 2 must divide both channel counts");
  BOOST_TEST(message([] { nn::Conv1d(4, 6, 3, {.stride = 0}); }) ==
             "Conv1d(4, 6, kernel_size=3): stride must be >= 1, got 0");
  BOOST_TEST(message([] { nn::Conv2d(4, 6, {3, 2}, {.padding = {0, -1}}); }) ==
             "Conv2d(4, 6, kernel_size=(3, 2)): padding must be >= 0, got (0, -1)");
  BOOST_TEST(message([] { nn::ConvTranspose2d(2, 2, 3, {.stride = 2, .output_padding = 2}); }) ==
             "ConvTranspose2d(2, 2, kernel_size=(3, 3)): output_padding (2, 2) must lie in [0, stride (2, 2))");
  nn::Conv1d c1(4, 6, 3, {.stride = 2, .padding = 1, .groups = 2});
  BOOST_TEST(message([&] { c1(mg::zeros({2, 3, 9})); }) ==
             "Conv1d(4, 6, kernel_size=3, stride=2, padding=1, groups=2): expected input [N, 4, L], got "
             "float32[2, 3, 9]");
  nn::Conv2d c2(3, 8, 3);
  BOOST_TEST(message([&] { c2(mg::zeros({1, 3, 5})); }) ==
             "Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1)): expected input [N, 3, H, W], got float32[1, 3, 5]");
  BOOST_TEST(nn::Conv2d(2, 4, {3, 1}, {.dilation = {2, 1}, .bias = false}).describe() ==
             "Conv2d(2, 4, kernel_size=(3, 1), stride=(1, 1), dilation=(2, 1), bias=false)");
  BOOST_TEST(nn::Conv1d(2, 4, 3, {.dilation = 2}).describe() == "Conv1d(2, 4, kernel_size=3, stride=1, dilation=2)");
}

// padding_mode as PyTorch's nn.Conv2d / nn.Conv1d: the input padded by F::pad
// in that mode, then convolved without padding; zeros is the op's own padding.
BOOST_AUTO_TEST_CASE(padding_modes) {
  mg::manual_seed(4);
  const mg::Tensor x = mg::uniform({2, 3, 5, 6});
  const std::pair<nn::PaddingMode, F::PadMode> modes[] = {{nn::PaddingMode::reflect, F::PadMode::reflect},
                                                          {nn::PaddingMode::replicate, F::PadMode::replicate},
                                                          {nn::PaddingMode::circular, F::PadMode::circular}};
  for (const auto& [mode, pad] : modes) {
    nn::Conv2d conv(3, 4, {3, 2}, {.stride = {1, 2}, .padding = {1, 2}, .padding_mode = mode});
    const mg::Tensor want = F::conv2d(F::pad(x, {2, 2, 1, 1}, pad), conv.weight(), conv.bias(), {.stride = {1, 2}});
    const mg::Tensor y = conv(x);
    BOOST_TEST_REQUIRE(y.shape() == want.shape());
    BOOST_TEST(y.to_vector<double>() == want.to_vector<double>(), boost::test_tools::per_element());
  }
  // Conv1d, circular, by hand: y[0] = w0 * x[L-1] + w1 * x[0] + w2 * x[1].
  nn::Conv1d ring(1, 1, 3, {.padding = 1, .bias = false, .padding_mode = nn::PaddingMode::circular});
  const mg::Tensor s = mg::tensor({1.f, 2.f, 3.f, 4.f, 5.f}, {1, 1, 5});
  const std::vector<double> w = ring.weight().to_vector<double>();
  const std::vector<double> y = ring(s).to_vector<double>();
  BOOST_TEST_REQUIRE(y.size() == 5u);
  BOOST_TEST(y[0] == w[0] * 5 + w[1] * 1 + w[2] * 2, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(y[4] == w[0] * 4 + w[1] * 5 + w[2] * 1, boost::test_tools::tolerance(1e-6));
  // zeros is the default and leaves describe() as it was; the others are named.
  BOOST_TEST(nn::Conv2d(3, 4, 3, {.padding = 1, .padding_mode = nn::PaddingMode::reflect}).describe() ==
             "Conv2d(3, 4, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), padding_mode=reflect)");
  BOOST_TEST(ring.describe() == "Conv1d(1, 1, kernel_size=3, stride=1, padding=1, bias=false, padding_mode=circular)");
  // reflect needs the padding smaller than the extent (F::pad's rule).
  nn::Conv2d wide(3, 4, 3, {.padding = 5, .padding_mode = nn::PaddingMode::reflect});
  BOOST_CHECK_THROW(wide(x), mg::ShapeError);
  // The gradient reaches x through the pad.
  mg::autodiff::GradManager gm;
  const mg::Tensor xs = mg::uniform({1, 3, 4, 4});
  nn::Conv2d rep(3, 2, 3, {.padding = 1, .padding_mode = nn::PaddingMode::replicate});
  gm.attach({xs});
  {
    auto rec = gm.record();
    gm.backward(F::sum(rep(xs)));
  }
  BOOST_TEST(xs.grad().defined());
}

// Conv2d halves the image, ConvTranspose2d restores it; SGD on the
// reconstruction error must lower it (both modules' backward reach every
// parameter).
BOOST_AUTO_TEST_CASE(encoder_decoder_learns) {
  mg::manual_seed(3);
  nn::Conv2d down(2, 4, 4, {.stride = 2, .padding = 1});
  nn::ConvTranspose2d up(4, 2, 4, {.stride = 2, .padding = 1});
  std::vector<mg::Tensor> params = down.parameters();
  for (const mg::Tensor& p : up.parameters()) params.push_back(p);
  mg::autodiff::GradManager gm;
  gm.attach(params);
  mg::optim::SGD opt(params, {.lr = 0.05});
  const mg::Tensor x = mg::uniform({4, 2, 8, 8});
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    mg::Tensor loss;
    {
      auto rec = gm.record();
      const mg::Tensor h = F::relu(down(x));
      BOOST_TEST_REQUIRE(h.shape() == mg::Shape({4, 4, 4, 4}));
      loss = F::mse_loss(up(h), x);
      gm.backward(loss);
    }
    for (const mg::Tensor& p : params) BOOST_TEST_REQUIRE(p.grad().defined());
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
    opt.step().clear_grad();
  }
  BOOST_TEST(last < 0.7 * first, "loss " << first << " -> " << last);
}

BOOST_AUTO_TEST_SUITE_END()
