// GradScaler's scale range: the scale and its reciprocal stay finite,
// normal float32 numbers, so a scaler can always recover. The scenario this
// guards against: a long run of NaN losses (bad batches) backed the scale
// off below 2.9e-39, where 1 / scale rounds to inf in float; from then on
// every zero gradient became 0 * inf = NaN, every step counted as an
// overflow and the scale sank to 4.9e-324 for good, skipping every clean
// step after it.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>

#include "amp_test_util.hpp"

namespace mg = mixgrad;
using amptest::CountingOptimizer;
using amptest::param_with_grad;
using mg::DType;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

bool all_finite(const mg::Tensor& t) {
  for (double v : t.to_vector<double>())
    if (!std::isfinite(v)) return false;
  return true;
}

// One manual-gear step on a parameter whose gradient is `grad` in `dt`.
// Returns whether the optimizer stepped; `unscaled` receives the gradient.
bool manual_step(mg::amp::GradScaler& s, const std::vector<double>& grad, DType dt, std::vector<double>* unscaled) {
  mg::Tensor p = param_with_grad(grad, dt);
  s.unscale({p});
  s.update();
  CountingOptimizer opt;
  s.step(opt);
  if (unscaled) *unscaled = p.grad().to_vector<double>();
  return opt.steps == 1;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(scale_range)

BOOST_AUTO_TEST_CASE(reciprocal_is_finite_and_normal_at_the_limits) {
  for (double scale : {mg::amp::kMinScaleLimit, mg::amp::kDefaultMinScale, 1.0, mg::amp::kMaxScaleLimit}) {
    const float applied = static_cast<float>(1.0 / scale);  // what float / 16-bit grads are multiplied by
    BOOST_TEST(std::isnormal(applied));
    BOOST_TEST(std::isnormal(static_cast<float>(scale)));  // a float32 dy of the scale
  }
  // Zero gradients stay zero at every scale in every dtype: never 0 * inf.
  for (DType dt : {DType::float32, DType::float16, DType::bfloat16, DType::float64}) {
    for (double scale : {mg::amp::kMinScaleLimit, mg::amp::kDefaultMinScale, 1.0, mg::amp::kMaxScaleLimit}) {
      BOOST_TEST_CONTEXT(dt << " grads at scale " << scale) {
        mg::amp::GradScaler s({.init_scale = scale, .growth_interval = 0, .min_scale = std::nullopt});
        std::vector<double> got;
        BOOST_TEST(manual_step(s, {0.0, -0.0, 0.0}, dt, &got));
        BOOST_TEST(!s.found_non_finite());
        BOOST_TEST(got == std::vector<double>({0.0, 0.0, 0.0}), boost::test_tools::per_element());
        // A gradient equal to the scale (where dt holds it) unscales to one,
        // exactly: the reciprocal of a power of two is exact in float.
        const bool representable = dt != DType::float16 || (scale >= 0x1p-24 && scale <= 65504.0);
        if (representable) {
          BOOST_TEST(manual_step(s, {scale, -scale}, dt, &got));
          BOOST_TEST(got == std::vector<double>({1.0, -1.0}), boost::test_tools::per_element());
        }
      }
    }
  }
}

// The reported scenario, directly on gradients of each floating dtype: a
// long run of NaN gradients, then clean ones (zeros among them). Before the
// range, 135 NaN steps from 2^4 reached an inf float reciprocal and no clean
// step was ever taken again.
BOOST_AUTO_TEST_CASE(long_nan_runs_then_clean_grads_are_taken) {
  for (DType dt : {DType::float32, DType::float16, DType::bfloat16, DType::float64}) {
    for (std::optional<double> floor : {std::optional<double>(mg::amp::kDefaultMinScale), std::optional<double>()}) {
      BOOST_TEST_CONTEXT(dt << " grads, min_scale " << floor.value_or(0.0)) {
        mg::amp::GradScaler s({.growth_interval = 5, .min_scale = floor});
        for (int i = 0; i < 1000; ++i) {
          BOOST_TEST_REQUIRE(!manual_step(s, {0.0, i % 2 ? kNaN : kInf, 1.0}, dt, nullptr));
          BOOST_TEST_REQUIRE(s.scale_factor() >= floor.value_or(mg::amp::kMinScaleLimit));
        }
        const double bottom = floor.value_or(mg::amp::kMinScaleLimit);
        BOOST_TEST(s.scale_factor() == bottom);
        // Clean steps: gradients that are the scale times 0.5 (0 where dt
        // cannot hold that), and zeros. Every one is taken; the scale
        // doubles every 5 steps.
        for (int i = 0; i < 50; ++i) {
          const double scale = s.scale_factor();
          std::vector<double> got;
          BOOST_TEST_REQUIRE(manual_step(s, {0.0, 0.5 * scale, -0.0}, dt, &got));
          BOOST_TEST_REQUIRE(got.size() == 3u);
          BOOST_TEST(got[0] == 0.0);
          BOOST_TEST(got[2] == 0.0);
          BOOST_TEST((got[1] == 0.5 || (dt == DType::float16 && got[1] == 0.0)));  // float16 flushes 2^-127
        }
        BOOST_TEST(s.scale_factor() == bottom * 0x1p10);
      }
    }
  }
}

// The same on a network: autocast (bfloat16, then float16), hundreds of NaN
// losses in a row, then clean losses: the clean steps are taken at once,
// the parameters stay finite and move, and the scale grows back.
BOOST_AUTO_TEST_CASE(training_recovers_after_hundreds_of_non_finite_losses) {
  for (DType low : {DType::bfloat16, DType::float16}) {
    BOOST_TEST_CONTEXT("autocast " << low) {
      mg::manual_seed(5);
      auto net = mg::nn::Sequential(mg::nn::Linear(8, 16), mg::nn::ReLU(), mg::nn::Linear(16, 3));
      const mg::Tensor x = mg::normal({32, 8});
      const mg::Tensor labels = mg::F::argmax(mg::F::matmul(x, mg::normal({8, 3})), 1);
      mg::autodiff::GradManager gm;
      gm.attach(net.parameters());
      mg::optim::SGD opt(net.parameters(), {.lr = 0.05});
      mg::amp::GradScaler scaler({.init_scale = 0x1p16, .growth_interval = 10});
      auto step = [&](double poison) {
        {
          mg::amp::autocast scope(true, low);
          auto rec = gm.record();
          auto loss = mg::F::cross_entropy(net(x), labels);
          if (poison != 1.0) loss = mg::F::mul(loss, poison);
          scaler.backward(gm, loss);
        }
        const int64_t count = opt.step_count(0);
        scaler.step(opt);  // skipped on the device when the flag is set
        opt.clear_grad();
        return opt.step_count(0) == count + 1;
      };
      for (int i = 0; i < 5; ++i) BOOST_TEST(step(1.0));
      for (int i = 0; i < 300; ++i) BOOST_TEST_REQUIRE(!step(i % 3 ? kNaN : kInf));
      BOOST_TEST(scaler.scale_factor() == mg::amp::kDefaultMinScale);
      const std::vector<float> before = net.parameters()[0].to_vector<float>();
      for (int i = 0; i < 60; ++i) BOOST_TEST_REQUIRE(step(1.0));
      BOOST_TEST(scaler.scale_factor() == mg::amp::kDefaultMinScale * 0x1p6);
      for (const auto& p : net.parameters()) BOOST_TEST(all_finite(p));
      BOOST_TEST(net.parameters()[0].to_vector<float>() != before);
    }
  }
}

// Upstream: PyTorch test_cuda.py / test_torch.py test_grad_scale_will_not_overflow.
BOOST_AUTO_TEST_CASE(growth_never_overflows_a_float32_dy) {
  // From 2^120, growing every clean step: the scale stops at 2^126, every
  // step stays clean (a float32 dy of 2^126 is finite), none is wasted.
  mg::Tensor w = mg::tensor({0.5f, -1.f, 0.f}, {3});
  mg::autodiff::GradManager gm;
  gm.attach(w);
  mg::amp::GradScaler scaler({.init_scale = 0x1p120, .growth_interval = 1});
  for (int i = 0; i < 20; ++i) {
    {
      auto rec = gm.record();
      scaler.backward(gm, mg::F::sum(mg::F::mul(w, 1e-3)));
    }
    BOOST_TEST_REQUIRE(!scaler.found_non_finite());
    BOOST_TEST(w.grad().to_vector<float>() == std::vector<float>(3, 1e-3f), boost::test_tools::per_element());
    w.set_grad(mg::Tensor());
  }
  BOOST_TEST(scaler.scale_factor() == mg::amp::kMaxScaleLimit);
}

BOOST_AUTO_TEST_SUITE_END()
