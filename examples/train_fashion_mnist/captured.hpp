// --cuda-graph: the whole training step (autocast forward, scaled backward,
// the optimizer step with its fused unscale, the schedule's step, the scale
// update) captured once as a CUDA graph by mg::cuda::CapturedStep and
// replayed for every batch: one launch per step instead of hundreds.
//
//   train::run_captured(opts, net, *optimizer, data->train, data->test);
//
// The step reads the static inputs x and y; each replay copies the next
// batch into them. The capture's warm-up takes 3 eager steps on the first
// batch. Batches must keep one shape, so the last partial batch of an epoch
// is dropped. The loss and the scale are read once per epoch (a read per
// step would make the host wait for the GPU every step).
#pragma once

#include <chrono>
#include <cstdio>
#include <memory>
#include <mixgrad/mixgrad.hpp>
#include <mixgrad/train/captured_step.hpp>
#include <optional>

#include "train_fashion_mnist/options.hpp"

namespace train {

namespace captured_detail {

inline double test_accuracy(mg::nn::Sequential& net, const mg::data::TensorDataset& test, const mg::Device& device) {
  net.train(false);
  mg::autodiff::no_grad ng;
  mg::data::DataLoader loader(test, {.batch_size = 500, .shuffle = false, .drop_last = false, .seed = 0, .device = device});
  mg::Tensor correct = mg::zeros({}, mg::DType::int64, device);
  for (const mg::data::Batch& b : loader)
    correct = correct + mg::F::sum(mg::F::eq(mg::F::argmax(net(b.images), 1), b.labels).to(mg::DType::int64));
  net.train(true);
  return static_cast<double>(correct.item<int64_t>()) / static_cast<double>(test.size());
}

}  // namespace captured_detail

/// Trains o.epochs epochs with the captured step; prints one line per epoch.
inline void run_captured(const Options& o, mg::nn::Sequential& net, mg::optim::Optimizer& opt,
                         const mg::data::TensorDataset& train_set, const mg::data::TensorDataset& test_set) {
  mg::data::DataLoader loader(train_set, {.batch_size = o.batch_size, .shuffle = true, .drop_last = true,
                                          .seed = o.seed, .device = o.device});
  mg::autodiff::GradManager gm;
  gm.attach(net.parameters());
  // A disabled scaler passes every call through: the same step without loss scaling.
  mg::amp::GradScaler scaler({.growth_interval = o.growth_interval, .enabled = o.precision.grad_scaler});
  std::unique_ptr<mg::optim::CosineAnnealingLR> sched;
  if (o.schedule == "cosine") sched = std::make_unique<mg::optim::CosineAnnealingLR>(opt, loader.size() * o.epochs);
  auto it = loader.begin();
  mg::Tensor x = it->images.clone(), y = it->labels.clone(), loss;
  auto step = [&] {
    {
      std::optional<mg::amp::autocast> ac;
      if (o.precision.autocast) ac.emplace(true, o.precision.low);
      auto rec = gm.record();
      loss = mg::F::cross_entropy(net(x), y);
      scaler.backward(gm, loss, {}, {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
    }
    scaler.step(opt);
    if (sched) sched->step(scaler);
    scaler.update();
    opt.clear_grad();
  };
  mg::cuda::CapturedStep captured(step, {{"images", x}, {"labels", y}});
  std::printf("cuda graph: the step is captured (3 eager warm-up steps on the first batch, then one launch per batch)\n");
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    int64_t steps = 0;
    if (epoch > 0) it = loader.begin();
    else ++it;  // the first batch was the warm-up's
    for (; it != loader.end(); ++it, ++steps) captured.replay({it->images, it->labels});
    const double last_loss = loss.item<double>();  // waits for the epoch's steps
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double acc = captured_detail::test_accuracy(net, test_set, o.device);
    std::printf("epoch %d/%d  last train loss %.4f  scale %g  test accuracy %.2f%%  %.2f s  %.0f img/s  (%lld replays)\n",
                epoch + 1, o.epochs, last_loss, scaler.scale_factor(), 100.0 * acc, seconds,
                static_cast<double>(steps * o.batch_size) / seconds, static_cast<long long>(steps));
    std::fflush(stdout);
  }
}

}  // namespace train
