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

namespace {

mg::Tensor seq_tensor(const mg::Shape& shape, double scale = 0.1, double shift = 0.0) {
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<double>(i) * 1.7 + 0.3) * scale * 10 + shift;
  return mg::tensor(v, shape, mg::DType::float32);
}

void set_values(const mg::Tensor& t, const mg::Tensor& v) {
  mg::Tensor dst = t;
  const auto src = v.to_vector<float>();
  std::copy(src.begin(), src.end(), dst.data<float>());
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(layers_with_ops)

BOOST_AUTO_TEST_CASE(linear_forward_and_default_init) {
  mg::manual_seed(5);
  nn::Linear fc(400, 30);
  BOOST_TEST(fc.weight().shape() == mg::Shape({30, 400}));
  BOOST_TEST(fc.bias().shape() == mg::Shape({30}));
  BOOST_TEST(fc.state_dict().keys() == std::vector<std::string>({"weight", "bias"}), boost::test_tools::per_element());
  const double bound = 1.0 / 20.0;  // 1 / sqrt(400)
  const auto w = fc.weight().to_vector<double>();
  BOOST_TEST(max_abs(w) <= bound);
  BOOST_TEST(max_abs(w) > 0.99 * bound);
  BOOST_TEST(max_abs(fc.bias().to_vector<double>()) <= bound);
  mg::manual_seed(5);
  nn::Linear again(400, 30);
  BOOST_TEST(again.weight().to_vector<float>() == fc.weight().to_vector<float>(), boost::test_tools::per_element());

  // y[n][o] = sum_i x[n][i] w[o][i] + b[o], by hand.
  nn::Linear small(3, 2);
  set_values(small.weight(), mg::tensor({1.f, 2.f, 3.f, -1.f, 0.5f, 0.f}, {2, 3}));
  set_values(small.bias(), mg::tensor({0.25f, -2.f}, {2}));
  const auto y = small(mg::tensor({1.f, 1.f, 1.f, 2.f, 0.f, -1.f}, {2, 3})).to_vector<float>();
  BOOST_TEST(y == std::vector<float>({6.25f, -2.5f, -0.75f, -4.f}), boost::test_tools::per_element());

  nn::Linear nob(3, 2, {.bias = false});
  BOOST_TEST(!nob.bias().defined());
  BOOST_TEST(nob.parameters().size() == 1u);
  BOOST_TEST(nob.describe() == "Linear(in_features=3, out_features=2, bias=false)");
  BOOST_CHECK_THROW(small(mg::zeros({2, 4})), mg::ShapeError);
  BOOST_CHECK_THROW(nn::Linear(0, 2), mg::ValueError);
}

BOOST_AUTO_TEST_CASE(conv2d_forward_against_direct_loops) {
  const int64_t N = 2, C = 4, H = 5, W = 6, O = 6, K = 3, groups = 2;
  nn::Conv2d conv(C, O, K, {.stride = {2, 1}, .padding = 1, .groups = groups});
  BOOST_TEST(conv.weight().shape() == mg::Shape({O, C / groups, K, K}));
  const double bound = 1.0 / std::sqrt(static_cast<double>(C / groups * K * K));
  BOOST_TEST(max_abs(conv.weight().to_vector<double>()) <= bound);
  BOOST_TEST(max_abs(conv.bias().to_vector<double>()) <= bound);

  const auto x = seq_tensor({N, C, H, W});
  const auto y = conv(x);
  const int64_t OH = (H + 2 - K) / 2 + 1, OW = (W + 2 - K) / 1 + 1;
  BOOST_REQUIRE(y.shape() == mg::Shape({N, O, OH, OW}));
  const auto xv = x.to_vector<double>(), wv = conv.weight().to_vector<double>(), bv = conv.bias().to_vector<double>();
  const auto yv = y.to_vector<double>();
  const int64_t cpg = C / groups, opg = O / groups;
  double worst = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = bv[o];
          const int64_t g = o / opg;
          for (int64_t c = 0; c < cpg; ++c)
            for (int64_t kh = 0; kh < K; ++kh)
              for (int64_t kw = 0; kw < K; ++kw) {
                const int64_t ih = oh * 2 - 1 + kh, iw = ow - 1 + kw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += xv[((n * C + g * cpg + c) * H + ih) * W + iw] * wv[((o * cpg + c) * K + kh) * K + kw];
              }
          worst = std::max(worst, std::abs(acc - yv[((n * O + o) * OH + oh) * OW + ow]));
        }
  BOOST_TEST(worst < 1e-4);
  BOOST_CHECK_THROW(conv(mg::zeros({1, 3, 5, 5})), mg::ShapeError);
  BOOST_CHECK_THROW(nn::Conv2d(3, 6, 3, {.groups = 2}), mg::ValueError);
  BOOST_CHECK_THROW(nn::Conv2d(4, 6, 3, {.stride = 0}), mg::ValueError);
  BOOST_TEST(nn::Conv2d(1, 32, 3, {.padding = 1}).describe() ==
             "Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))");
}

BOOST_AUTO_TEST_CASE(batch_norm_training_and_eval) {
  const int64_t N = 3, C = 2, H = 2, W = 2;
  nn::BatchNorm2d bn(C);
  BOOST_TEST(bn.state_dict().keys() == std::vector<std::string>({"weight", "bias", "running_mean", "running_var"}),
             boost::test_tools::per_element());
  BOOST_TEST(bn.parameters().size() == 2u);
  BOOST_TEST(bn.buffers().size() == 2u);

  const auto x = seq_tensor({N, C, H, W}, 0.3, 1.0);
  const auto xv = x.to_vector<double>();
  // Batch statistics per channel, by hand.
  std::vector<double> mean(C, 0), var(C, 0);
  const double m = N * H * W;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < H * W; ++i) mean[c] += xv[(n * C + c) * H * W + i] / m;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < H * W; ++i) var[c] += std::pow(xv[(n * C + c) * H * W + i] - mean[c], 2) / m;

  const auto y = bn(x).to_vector<double>();  // training mode
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < H * W; ++i) {
        const int64_t k = (n * C + c) * H * W + i;
        BOOST_TEST(y[k] == (xv[k] - mean[c]) / std::sqrt(var[c] + 1e-5), boost::test_tools::tolerance(1e-4));
      }
  const auto rm = bn.running_mean().to_vector<double>(), rv = bn.running_var().to_vector<double>();
  for (int64_t c = 0; c < C; ++c) {
    BOOST_TEST(rm[c] == 0.1 * mean[c], boost::test_tools::tolerance(1e-5));
    BOOST_TEST(rv[c] == 0.9 + 0.1 * var[c] * m / (m - 1), boost::test_tools::tolerance(1e-5));  // unbiased
  }

  // Eval: the running statistics, and the buffers stay as they are.
  set_values(bn.weight(), mg::tensor({2.f, 0.5f}, {2}));
  set_values(bn.bias(), mg::tensor({1.f, -1.f}, {2}));
  bn.eval();
  const auto z = bn(x).to_vector<double>();
  const double w[2] = {2.0, 0.5}, b[2] = {1.0, -1.0};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < H * W; ++i) {
        const int64_t k = (n * C + c) * H * W + i;
        BOOST_TEST(z[k] == (xv[k] - rm[c]) / std::sqrt(rv[c] + 1e-5) * w[c] + b[c], boost::test_tools::tolerance(1e-4));
      }
  BOOST_TEST(bn.running_mean().to_vector<double>() == rm, boost::test_tools::per_element());

  nn::BatchNorm2d plain(C, {.affine = false, .track_running_stats = false});
  BOOST_TEST(plain.state_dict().empty());
  plain.eval();  // no running stats: batch statistics even in eval
  BOOST_TEST(plain(x).to_vector<double>()[0] == (xv[0] - mean[0]) / std::sqrt(var[0] + 1e-5),
             boost::test_tools::tolerance(1e-4));
  BOOST_CHECK_THROW(bn(mg::zeros({2, 3, 2, 2})), mg::ShapeError);
  BOOST_CHECK_THROW(nn::BatchNorm2d(4, {.momentum = 1.5}), mg::ValueError);
}

BOOST_AUTO_TEST_CASE(activations_match_their_formulas) {
  const std::vector<double> xs = {-3.0, -0.5, 0.0, 0.25, 2.0};
  auto x = mg::tensor(xs, {5}, mg::DType::float32);
  const auto relu = nn::ReLU()(x).to_vector<double>();
  const auto leaky = nn::LeakyReLU(0.2)(x).to_vector<double>();
  const auto gelu = nn::GELU()(x).to_vector<double>();
  const auto silu = nn::SiLU()(x).to_vector<double>();
  const auto sig = nn::Sigmoid()(x).to_vector<double>();
  const auto th = nn::Tanh()(x).to_vector<double>();
  const auto softplus = nn::Softplus(2.0, 1.0)(x).to_vector<double>();
  const auto hswish = nn::Hardswish()(x).to_vector<double>();
  const auto mish = nn::Mish()(x).to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double v = xs[i], s = 1 / (1 + std::exp(-v));
    BOOST_TEST(softplus[i] == (2 * v > 1 ? v : std::log1p(std::exp(2 * v)) / 2), boost::test_tools::tolerance(1e-5));
    BOOST_TEST(hswish[i] == v * std::min(std::max(v + 3, 0.0), 6.0) / 6, boost::test_tools::tolerance(1e-5));
    BOOST_TEST(mish[i] == v * std::tanh(std::log1p(std::exp(v))), boost::test_tools::tolerance(1e-5));
    BOOST_TEST(relu[i] == std::max(v, 0.0));
    BOOST_TEST(leaky[i] == (v >= 0 ? v : 0.2 * v), boost::test_tools::tolerance(1e-6));
    BOOST_TEST(gelu[i] == 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), boost::test_tools::tolerance(1e-5));
    BOOST_TEST(silu[i] == v * s, boost::test_tools::tolerance(1e-5));
    BOOST_TEST(sig[i] == s, boost::test_tools::tolerance(1e-5));
    BOOST_TEST(th[i] == std::tanh(v), boost::test_tools::tolerance(1e-5));
  }
  BOOST_TEST(nn::Identity()(x).impl() == x.impl());
  BOOST_TEST(nn::Softplus(2.0, 1.0).describe() == "Softplus(beta=2, threshold=1)");
  BOOST_TEST(nn::Mish().describe() == "Mish()");
  BOOST_TEST(nn::Hardswish().describe() == "Hardswish()");
}

BOOST_AUTO_TEST_CASE(pooling_layers) {
  // One 4x4 channel holding 0..15.
  auto x = mg::arange(0.0, 16.0).reshape({1, 1, 4, 4});
  BOOST_TEST(nn::MaxPool2d(2)(x).to_vector<float>() == std::vector<float>({5, 7, 13, 15}),
             boost::test_tools::per_element());
  BOOST_TEST(nn::AvgPool2d(2)(x).to_vector<float>() == std::vector<float>({2.5, 4.5, 10.5, 12.5}),
             boost::test_tools::per_element());
  BOOST_TEST(nn::AdaptiveAvgPool2d(1)(x).to_vector<float>() == std::vector<float>({7.5f}),
             boost::test_tools::per_element());
  // 3x3 windows, stride 2, padding 1 over 4x4: centres at 0, 2 -> 2x2 outputs.
  BOOST_TEST(nn::MaxPool2d(3, {.stride = 2, .padding = 1})(x).to_vector<float>() == std::vector<float>({5, 7, 13, 15}),
             boost::test_tools::per_element());
  BOOST_TEST(nn::MaxPool2d(2).describe() == "MaxPool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0))");
  BOOST_CHECK_THROW(nn::MaxPool2d(0), mg::ValueError);
  BOOST_CHECK_THROW(nn::AdaptiveAvgPool2d({1, 0}), mg::ValueError);
}

BOOST_AUTO_TEST_SUITE_END()
