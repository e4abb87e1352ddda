// Mixed precision end to end on small MLPs: gradient accumulation with the
// manual gear matches the big batch, and float16 training that only works
// with loss scaling.
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
using mg::DType;

namespace {

struct Problem {
  mg::Tensor x, labels;
};

Problem make_problem(int64_t n, uint64_t seed) {
  mg::manual_seed(seed);
  auto x = mg::normal({n, 16});
  auto labels = mg::F::argmax(mg::F::matmul(x, mg::normal({16, 4})), 1);
  return {x, labels};
}

mg::nn::Sequential make_mlp(uint64_t seed) {
  mg::manual_seed(seed);
  return mg::nn::Sequential(mg::nn::Linear(16, 32), mg::nn::ReLU(), mg::nn::Linear(32, 4));
}

std::vector<std::vector<float>> grads_of(mg::nn::Module& net) {
  std::vector<std::vector<float>> g;
  for (const auto& p : net.parameters()) g.push_back(p.grad().to_vector<float>());
  return g;
}

double max_rel_diff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  double scale = 0, diff = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a[i].size(); ++j) {
      scale = std::max(scale, std::abs(static_cast<double>(b[i][j])));
      diff = std::max(diff, std::abs(static_cast<double>(a[i][j]) - b[i][j]));
    }
  return diff / scale;
}

}  // namespace

BOOST_AUTO_TEST_CASE(accumulated_micro_batches_equal_the_big_batch_gradient) {
  const auto data = make_problem(64, 1);
  constexpr int k = 4;
  // Reference: one float32 backward over all 64 samples.
  auto big = make_mlp(7);
  {
    mg::autodiff::GradManager gm;
    gm.attach(big.parameters());
    auto r = gm.record();
    gm.backward(mg::F::cross_entropy(big(data.x), data.labels));
  }
  const auto reference = grads_of(big);

  // float32 accumulation: the same gradient up to rounding order.
  auto acc32 = make_mlp(7);
  {
    mg::autodiff::GradManager gm;
    gm.attach(acc32.parameters());
    for (int i = 0; i < k; ++i) {
      auto r = gm.record();
      auto loss = mg::F::cross_entropy(acc32(data.x.narrow(0, i * 16, 16)), data.labels.narrow(0, i * 16, 16));
      gm.backward(mg::F::div(loss, double(k)));
    }
  }
  BOOST_TEST(max_rel_diff(grads_of(acc32), reference) < 1e-5);

  // float16 autocast + manual gear: scaled backward per micro-batch, one unscale.
  for (DType low : {DType::float16, DType::bfloat16}) {
    auto acc = make_mlp(7);
    mg::autodiff::GradManager gm;
    gm.attach(acc.parameters());
    mg::amp::GradScaler scaler({.init_scale = 1024});
    for (int i = 0; i < k; ++i) {
      mg::amp::autocast scope(true, low);
      auto r = gm.record();
      auto loss = mg::F::cross_entropy(acc(data.x.narrow(0, i * 16, 16)), data.labels.narrow(0, i * 16, 16));
      gm.backward(mg::F::div(loss, double(k)), mg::full_like(loss, scaler.scale_factor()));
    }
    scaler.unscale(gm.attached_tensors());
    BOOST_TEST(!scaler.found_non_finite());
    for (const auto& p : acc.parameters()) BOOST_TEST(p.grad().dtype() == DType::float32);
    // bfloat16 keeps 8 significant bits: inputs, weights, activations and
    // gradients each round by up to 0.4 %.
    const double tol = low == DType::float16 ? 5e-3 : 6e-2;
    const double diff = max_rel_diff(grads_of(acc), reference);
    BOOST_TEST(diff < tol, "low precision " << low << ": max difference " << diff << " of the largest gradient");
  }
}

namespace {

// Trains the MLP on a loss multiplied by 1e-6 (so its gradients, about
// 1e-8, are below half of float16's smallest subnormal, 6e-8) with lr
// scaled up by 1e6: in exact arithmetic the same training as loss x 1 with
// lr 0.1.
double train_tiny_loss(DType precision, std::optional<double> loss_scale, std::vector<double>* zero_grad_fraction,
                       double* initial_loss = nullptr) {
  const auto data = make_problem(128, 3);
  auto net = make_mlp(11);
  mg::autodiff::GradManager gm;
  gm.attach(net.parameters());
  mg::optim::SGD opt(net.parameters(), {.lr = 0.1 / 1e-6});
  mg::amp::GradScaler scaler({.init_scale = loss_scale.value_or(1.0), .growth_interval = 0});
  double loss_value = 0;
  for (int step = 0; step < 60; ++step) {
    mg::amp::autocast scope(precision != DType::float32, precision == DType::float32 ? DType::bfloat16 : precision);
    {
      auto r = gm.record();
      auto loss = mg::F::mul(mg::F::cross_entropy(net(data.x), data.labels), 1e-6);
      loss_value = loss.item<double>() / 1e-6;
      if (step == 0 && initial_loss) *initial_loss = loss_value;
      if (loss_scale) scaler.backward(gm, loss);
      else gm.backward(loss);
    }
    if (zero_grad_fraction && step == 0) {
      const auto g = net.parameters()[0].grad().to_vector<float>();
      zero_grad_fraction->push_back(std::count(g.begin(), g.end(), 0.f) / double(g.size()));
    }
    opt.step().clear_grad();
  }
  return loss_value;
}

}  // namespace

BOOST_AUTO_TEST_CASE(float16_needs_loss_scaling_and_then_trains_like_float32) {
  std::vector<double> zeros;
  double initial = 0;
  const double fp32 = train_tiny_loss(DType::float32, std::nullopt, &zeros, &initial);
  const double fp16_unscaled = train_tiny_loss(DType::float16, std::nullopt, &zeros);
  const double fp16_scaled = train_tiny_loss(DType::float16, 1048576.0, &zeros);
  BOOST_TEST_MESSAGE("final loss: fp32 " << fp32 << ", fp16 unscaled " << fp16_unscaled << ", fp16 scaled "
                                         << fp16_scaled << "; zero first-layer grads: " << zeros[0] << " / "
                                         << zeros[1] << " / " << zeros[2]);
  const double progress32 = initial - fp32;
  BOOST_TEST(progress32 > 0.3 * initial);  // the task is learnable
  // Unscaled float16: the first layer's gradients underflow to zero, and
  // only the few output gradients that round to a subnormal get through.
  BOOST_TEST(zeros[1] > 0.99);
  BOOST_TEST(initial - fp16_unscaled < 0.5 * progress32);
  // Scaled: the gradients survive and the run tracks float32.
  BOOST_TEST(zeros[2] < 0.5);
  BOOST_TEST(std::abs(fp16_scaled - fp32) < 0.05 * progress32);
}
