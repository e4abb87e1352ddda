// Device tests of mg::cuda::CapturedStep (mixgrad/train/captured_step.hpp):
// a whole AMP step (autocast forward, scaled backward, the fused unscale
// and Adam update, the cosine schedule's device step, the scale update)
// replayed as one CUDA graph must train exactly as the eager steps do,
// overflows included; it must be faster than the eager step; and the
// rules (no host sync inside, static shapes) are refused by name on a real
// device. Linked into test_cuda_device, whose main exits 77 without a GPU.
// Its host-side rules are tested without a GPU in test_capture_rules.cpp.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backend/copy.hpp"
#include "device_test_support.hpp"
#include "mixgrad/mixgrad.hpp"
#include "mixgrad/train/captured_step.hpp"

using namespace device_test;

namespace {

constexpr int kBatch = 64, kIn = 32, kHidden = 64, kOut = 10;

// One model, optimizer, scaler and schedule; the step reads the static
// inputs x and y and writes `loss`.
struct Trainer {
  mg::nn::Sequential net{mg::nn::Linear(kIn, kHidden), mg::nn::ReLU(), mg::nn::Linear(kHidden, kHidden),
                         mg::nn::ReLU(), mg::nn::Linear(kHidden, kOut)};
  mg::autodiff::GradManager gm;
  std::unique_ptr<mg::optim::Adam> opt;
  mg::amp::GradScaler scaler{mg::amp::GradScalerOptions{.init_scale = 65536.0, .growth_factor = 2.0,
                                                        .backoff_factor = 0.5, .growth_interval = 50,
                                                        .min_scale = 1.0, .max_scale = std::nullopt,
                                                        .enabled = true}};
  std::unique_ptr<mg::optim::CosineAnnealingLR> sched;
  mg::Tensor x = mg::zeros({kBatch, kIn}, mg::DType::float32, kGpu);
  mg::Tensor y = mg::zeros({kBatch}, mg::DType::int64, kGpu);
  mg::Tensor loss;

  explicit Trainer(uint64_t seed) {
    mg::manual_seed(seed);
    net.to(kGpu);
    gm.attach(net.parameters());
    opt = std::make_unique<mg::optim::Adam>(net.parameters(), mg::optim::AdamOptions{.lr = 3e-3});
    sched = std::make_unique<mg::optim::CosineAnnealingLR>(*opt, 300, 1e-4);
  }
  void step() {
    {
      mg::amp::autocast ac(true, mg::DType::float16);
      auto rec = gm.record();
      loss = mg::F::cross_entropy(net(x), y);
      scaler.backward(gm, loss, {}, {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
    }
    scaler.step(*opt);
    sched->step(scaler);
    scaler.update();
    opt->clear_grad();
  }
};

// Batch i: a fixed random problem; every 37th batch holds an infinity, so
// its gradients overflow and the step is skipped on the device.
std::pair<mg::Tensor, mg::Tensor> batch(int i) {
  mg::manual_seed(1000 + static_cast<uint64_t>(i));
  mg::Tensor x = mg::normal({kBatch, kIn}, 0.0, 1.0);
  if (i % 37 == 36) mg::backend::fill(x.narrow(0, 3, 1), std::numeric_limits<double>::infinity());
  mg::Tensor y = mg::F::argmax(mg::normal({kBatch, kOut}, 0.0, 1.0), 1);
  return {x.to(kGpu), y.to(kGpu)};
}

std::vector<float> params_of(Trainer& t) {
  std::vector<float> all;
  for (const mg::Tensor& p : t.net.parameters()) {
    const std::vector<float> v = p.to(kCpu).to_vector<float>();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_device_captured_step)

// 3 warm-up steps on batch 0, then 1,000 steps: eager against replayed. The
// lr of the cosine schedule, Adam's step count and the loss scale must be
// read from the device at each replay, or the runs part.
BOOST_AUTO_TEST_CASE(a_thousand_replayed_steps_train_as_the_eager_steps) {
  // MIXGRAD_CAPTURED_STEPS shortens it (gpu-check.sh --profile runs 100 under memcheck).
  const char* env = std::getenv("MIXGRAD_CAPTURED_STEPS");
  const int kSteps = env != nullptr ? std::max(1, std::atoi(env)) : 1000;
  constexpr int kWarmup = 3;
  int expected_overflows = 0;
  for (int i = 1; i <= kSteps; ++i) expected_overflows += i % 37 == 36 ? 1 : 0;
  Trainer eager(11), graphed(11);
  std::vector<double> eager_loss, graphed_loss;
  auto [x0, y0] = batch(0);
  for (Trainer* t : {&eager, &graphed}) {
    mg::backend::copy(x0, t->x);
    mg::backend::copy(y0, t->y);
  }
  for (int i = 0; i < kWarmup; ++i) eager.step();
  mg::cuda::CapturedStep step([&] { graphed.step(); }, {{"x", graphed.x}, {"y", graphed.y}},
                              {.warmup_steps = kWarmup, .device = 0});
  for (int i = 1; i <= kSteps; ++i) {
    auto [xb, yb] = batch(i);
    mg::backend::copy(xb, eager.x);
    mg::backend::copy(yb, eager.y);
    eager.step();
    step.replay({xb, yb});
    eager_loss.push_back(scalar(eager.loss));
    graphed_loss.push_back(scalar(graphed.loss));
  }
  BOOST_TEST(step.replays() == kSteps);
  int overflows = 0, mismatches = 0;
  for (int i = 0; i < kSteps; ++i) {
    if (!std::isfinite(eager_loss[static_cast<size_t>(i)])) ++overflows;
    const bool same = std::isfinite(eager_loss[static_cast<size_t>(i)])
                          ? relatively_close(graphed_loss[static_cast<size_t>(i)], eager_loss[static_cast<size_t>(i)], 1e-5)
                          : !std::isfinite(graphed_loss[static_cast<size_t>(i)]);
    if (!same && mismatches++ < 5)
      BOOST_ERROR("step " << i + 1 << ": replayed loss " << graphed_loss[static_cast<size_t>(i)] << ", eager "
                          << eager_loss[static_cast<size_t>(i)]);
  }
  BOOST_TEST(overflows == expected_overflows);
  BOOST_TEST(mismatches == 0);
  BOOST_TEST(graphed.scaler.scale_factor() == eager.scaler.scale_factor());
  BOOST_TEST(graphed.sched->last_epoch() == eager.sched->last_epoch());
  BOOST_TEST(graphed.sched->last_epoch() <= kWarmup + kSteps - overflows);  // skipped steps do not advance it
  BOOST_TEST(graphed.opt->lr() == eager.opt->lr());
  const std::vector<float> pe = params_of(eager), pg = params_of(graphed);
  BOOST_REQUIRE(pe.size() == pg.size());
  double worst = 0;
  for (size_t i = 0; i < pe.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(pe[i]) - pg[i]));
  BOOST_TEST(worst <= 1e-5, "largest parameter difference " << worst);
}

// A captured MLP step is one launch instead of hundreds: faster than eager.
BOOST_AUTO_TEST_CASE(a_captured_mlp_step_is_faster_than_the_eager_step) {
  constexpr int kReps = 200;
  Trainer t(5);
  auto [xb, yb] = batch(1);
  mg::backend::copy(xb, t.x);
  mg::backend::copy(yb, t.y);
  for (int i = 0; i < 5; ++i) t.step();
  auto time_ms = [&](const std::function<void()>& f) {
    mg::cuda::synchronize(0);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kReps; ++i) f();
    mg::cuda::synchronize(0);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / kReps;
  };
  const double eager_ms = time_ms([&] { t.step(); });
  mg::cuda::CapturedStep step([&] { t.step(); }, {{"x", t.x}, {"y", t.y}});
  const double graph_ms = time_ms([&] { step.replay(); });
  std::printf("captured MLP step: %.4f ms, eager %.4f ms (%.2fx)\n", graph_ms, eager_ms, eager_ms / graph_ms);
  BOOST_TEST(graph_ms < eager_ms);
}

// On the device: a step that reads a value on the host is refused by name,
// nothing is captured, and the model still trains eagerly afterwards; a
// replay with another shape is a ShapeError naming the input.
BOOST_AUTO_TEST_CASE(a_syncing_step_and_a_shape_change_are_refused_by_name) {
  Trainer t(7);
  auto [xb, yb] = batch(2);
  mg::backend::copy(xb, t.x);
  mg::backend::copy(yb, t.y);
  double seen = 0;
  // The read comes first: a cross_entropy captured before it would leave a
  // label check deferred on a status no kernel wrote (docs/captured-step.md).
  BOOST_CHECK_EXCEPTION(mg::cuda::CapturedStep([&] {
    seen = mg::F::sum(t.x).item<double>();
    t.step();
  }, {{"x", t.x}, {"y", t.y}}), mg::StateError, [](const mg::StateError& e) {
    return std::string(e.what()).find("copy to the host") != std::string::npos &&
           std::string(e.what()).find("CapturedStep") != std::string::npos;
  });
  BOOST_TEST(std::isfinite(seen));  // the warm-up's reads were eager
  const int64_t syncs = mg::backend::host_sync_count();
  t.step();  // still trains eagerly: no capture left open
  BOOST_TEST(mg::backend::host_sync_count() == syncs);
  BOOST_TEST(std::isfinite(scalar(t.loss)));
  mg::cuda::CapturedStep step([&] { t.step(); }, {{"x", t.x}, {"y", t.y}});
  // The first replay before any host read: the label check cross_entropy
  // deferred during the capture reads the status the replay writes.
  step.replay();
  BOOST_TEST(std::isfinite(scalar(t.loss)));
  BOOST_CHECK_EXCEPTION(step.replay({mg::zeros({kBatch + 1, kIn}, mg::DType::float32, kGpu), t.y}), mg::ShapeError,
                        [](const mg::ShapeError& e) { return std::string(e.what()).find("input 'x'") != std::string::npos; });
  BOOST_CHECK_THROW(step.replay({t.x.to(kCpu), t.y}), mg::DeviceError);
  BOOST_TEST(step.replays() == 1);
}

BOOST_AUTO_TEST_SUITE_END()
