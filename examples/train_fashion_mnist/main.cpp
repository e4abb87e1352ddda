// train_fashion_mnist — the first program to run: train an MLP, a CNN or a
// small ResNet on Fashion-MNIST, in float32 or with automatic mixed precision,
// written the way MegEngine's AMP guide writes it:
//
//   auto train_step = mg::amp::autocast().wrap([&](x, y) {     // the step runs in autocast
//     { auto recording = gm.record();                          // `with gm:`
//       loss = mg::F::cross_entropy(net(x), y);
//       scaler.backward(gm, loss); }                           // scale, backward, unscale, update
//     opt.step().clear_grad();                                 // skips params of an overflowed step
//   });
//
// With --accumulate k the manual gear runs instead: k micro-batches each
// call scaler.backward(gm, loss, {}, {.unscale_grad = false, ...}), their
// gradients add up scaled, then one scaler.unscale / scaler.update / opt.step.
//
//   train_fashion_mnist                  # CNN, fp32, SGD + cosine lr, 3 epochs
//   train_fashion_mnist --amp            # bf16 autocast + GradScaler
//   train_fashion_mnist --help           # every option
//   train_fashion_mnist --save ckpt --stop-after 1 && train_fashion_mnist --save ckpt --resume ckpt
//   mpirun -np 2 train_fashion_mnist --distributed --threads 1   # data parallel (distributed.hpp)
//
// The data comes from `apt-get install dataset-fashion-mnist` (or --data-dir).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <mixgrad/mixgrad.hpp>
#include <numbers>
#include <string>
#include <vector>

#include "models.hpp"
#include "train_fashion_mnist/distributed.hpp"
#include "train_fashion_mnist/metrics.hpp"
#include "train_fashion_mnist/options.hpp"
#include "train_fashion_mnist/progress.hpp"
#include "train_fashion_mnist/report.hpp"

namespace mg = mixgrad;
using Clock = std::chrono::steady_clock;

namespace {

mg::nn::Sequential make_model(const std::string& name) {
  if (name == "mlp") return models::make_mlp();
  if (name == "resnet") return models::make_resnet();
  return models::make_cnn();
}

std::unique_ptr<mg::optim::Optimizer> make_optimizer(const train::Options& o, const std::vector<mg::Tensor>& params) {
  if (o.optimizer == "adam") return std::make_unique<mg::optim::Adam>(params, mg::optim::AdamOptions{.lr = o.lr});
  if (o.optimizer == "adamw") return std::make_unique<mg::optim::AdamW>(params, mg::optim::AdamWOptions{.lr = o.lr});
  return std::make_unique<mg::optim::SGD>(params, mg::optim::SGDOptions{.lr = o.lr, .momentum = 0.9});
}

// Fraction of the test images classified correctly: eval mode (running
// batch-norm statistics), nothing recorded, the same precision as training.
double evaluate(mg::nn::Module& net, mg::data::DataLoader& loader, const train::Precision& p) {
  mg::amp::autocast scope(p.autocast, p.low);
  net.eval();
  int64_t correct = 0, total = 0;
  for (const auto& [x, y] : loader) {
    const auto predicted = mg::F::argmax(net(x), 1).to_vector<int64_t>();
    const auto labels = y.to_vector<int64_t>();
    for (size_t i = 0; i < labels.size(); ++i) correct += predicted[i] == labels[i];
    total += static_cast<int64_t>(labels.size());
  }
  net.train();
  return total ? static_cast<double>(correct) / static_cast<double>(total) : 0.0;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

int main(int argc, char** argv) {
  train::Options opts;
  if (auto code = train::parse_options(argc, argv, opts)) return *code;
  const train::Precision& p = opts.precision;
  if (opts.device.is_cuda() && opts.device.index() >= mg::cuda::device_count()) {
    // Before the data set loads: say so at once.
    std::string why = "--device " + mg::to_string(opts.device) + ": ";
    const int count = mg::cuda::device_count();
    if (count == 0) {
      why += "this process sees no CUDA device (no GPU or driver, or a build without CUDA)";
    } else {
      why += "only ";
      why += std::to_string(count);
      why += " CUDA device(s) exist";
    }
    const mg::DeviceError e(why);
    std::fprintf(stderr, "train_fashion_mnist: DeviceError: %s\n", e.what());
    return 1;
  }
  try {
    train::DataParallel dp;
    if (!train::start_data_parallel(opts, dp)) return train::kUsageError;
    mg::set_num_threads(opts.threads);
    mg::manual_seed(opts.seed);
    train::MetricsWriter metrics;
    if (!train::open_metrics(dp.is_main() ? opts.metrics : "", metrics)) return train::kUsageError;
    auto data = train::load_fashion_mnist(opts.data_dir, opts.limit_train);
    if (!data) return train::kUsageError;
    mg::data::DataLoader train_loader = train::make_train_loader(dp, data->train, opts);
    mg::data::DataLoader test_loader(data->test, {.batch_size = 500, .device = opts.device});

    auto net = make_model(opts.model);
    net.to(opts.device);
    mg::autodiff::GradManager gm;
    auto optimizer = make_optimizer(opts, net.parameters());
    mg::optim::Optimizer& opt = *optimizer;
    mg::amp::GradScaler scaler({.growth_interval = opts.growth_interval});  // 2^4, x2 growth, x0.5 backoff
    train::attach_data_parallel(dp, gm, net, scaler);  // alone: gm.attach(net.parameters())
    train::print_header(opts, net, data->train.size(), data->test.size());
    if (dp.on)
      std::printf("data parallel: %d processes x batch %lld (%lld images per step)\n", dp.world,
                  static_cast<long long>(opts.batch_size), static_cast<long long>(opts.batch_size * dp.world));

    // The automatic gear (--accumulate 1): one batch, one step.
    auto train_step = mg::amp::autocast(p.autocast, p.low).wrap([&](const mg::Tensor& x, const mg::Tensor& y) {
      mg::Tensor loss;
      {
        auto recording = gm.record();  // `with gm:`
        loss = mg::F::cross_entropy(net(x), y);
        if (p.grad_scaler)
          scaler.backward(gm, loss);  // dy = scale; backward; unscale the grads; update the scale
        else
          gm.backward(loss);
      }
      opt.step().clear_grad();  // an overflowed step (the scaler's flag) is skipped on the device
      return loss;
    });

    // The manual gear (--accumulate k): a micro-batch's forward and backward;
    // the gradients add up in .grad() until the step. `share` (1 / the number
    // of micro-batches of the step) makes their sum the step's mean loss.
    auto micro_batch = [&](const mg::Tensor& x, const mg::Tensor& y, double share) {
      mg::amp::autocast scope(p.autocast, p.low);
      auto recording = gm.record();
      auto loss = mg::F::cross_entropy(net(x), y) * share;
      if (p.grad_scaler)  // dy = scale, no unscale yet: the gradients accumulate scaled
        scaler.backward(gm, loss, mg::Tensor(), {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
      else
        gm.backward(loss);
      return loss;
    };
    auto accumulated_step = [&] {
      if (p.grad_scaler) {
        scaler.unscale(gm.attached_tensors());  // one fused pass: x 1/scale, detect inf / NaN
        scaler.update();
      }
      opt.step().clear_grad();
    };

    const int64_t batches = train_loader.size();
    const int64_t steps_per_epoch = (batches + opts.accumulate - 1) / opts.accumulate;
    const int64_t total_steps = steps_per_epoch * opts.epochs;
    auto lr_at = [&](int64_t step) {  // cosine decay from lr to 0 over the run, per optimizer step
      if (opts.schedule == "constant") return opts.lr;
      return 0.5 * opts.lr * (1.0 + std::cos(std::numbers::pi * static_cast<double>(step) / total_steps));
    };

    // Checkpoints: everything the run needs to continue exactly, including
    // the shuffling (train_loader) and the global generator behind dropout.
    int64_t step = 0;
    auto checkpoint = [&] {
      return mg::io::Checkpoint{.model = &net, .optimizer = &opt, .scaler = &scaler, .loader = &train_loader,
                                .step = step, .metadata = {{"model", opts.model}, {"optimizer", opts.optimizer}}};
    };
    if (!opts.save.empty()) std::filesystem::create_directories(opts.save);
    int first_epoch = 1;
    if (!opts.resume.empty()) {
      const auto info = mg::io::load_checkpoint(opts.resume, checkpoint());
      step = info.step;
      first_epoch = static_cast<int>(train_loader.epoch()) + 1;
      std::printf("resumed from %s: step %lld, next epoch %d\n", info.path.c_str(), static_cast<long long>(step),
                  first_epoch);
    }
    const int last_epoch = opts.stop_after > 0 ? std::min(opts.stop_after, opts.epochs) : opts.epochs;

    train::RunSummary summary;
    const auto run_start = Clock::now();
    for (int epoch = first_epoch; epoch <= last_epoch; ++epoch) {
      train::begin_epoch(dp, epoch - 1);
      train::ProgressBar bar(epoch, opts.epochs, batches, train::stdout_is_terminal());
      train::EpochMetrics em{.epoch = epoch};
      double loss_sum = 0.0;  // sum over images of their batch's loss
      int64_t images = 0, own_images = 0, batch = 0, skipped_before = summary.skipped_steps;
      double step_loss = 0.0;  // the current step's loss, summed over its micro-batches
      const auto start = Clock::now();
      for (const auto& [x, y] : train_loader) {
        const int64_t first = batch / opts.accumulate * opts.accumulate;  // of this step's micro-batches
        const int64_t group = std::min<int64_t>(opts.accumulate, batches - first);
        const bool last = batch == first + group - 1;
        const double scale_used = p.grad_scaler ? scaler.scale_factor() : 1.0;
        if (batch == first) opt.set_lr(lr_at(step));
        double loss = 0.0;
        if (opts.accumulate == 1) {
          loss = train_step(x, y).item<double>();
        } else {
          loss = micro_batch(x, y, 1.0 / static_cast<double>(group)).item<double>() * static_cast<double>(group);
          if (last) accumulated_step();
        }
        step_loss += loss / static_cast<double>(group);
        loss_sum += loss * static_cast<double>(x.size(0));  // this rank's
        own_images += x.size(0);
        images += x.size(0) * dp.world;  // every rank's batch has this size
        ++batch;
        if (last) {
          const bool skipped = p.grad_scaler && scaler.found_non_finite();
          summary.skipped_steps += skipped;
          metrics.step({.step = ++step, .epoch = epoch, .loss = step_loss, .scale_factor = scale_used,
                        .lr = opt.lr(), .skipped = skipped});
          step_loss = 0.0;
        }
        bar.update({.batch = batch, .images = images, .loss = loss_sum / static_cast<double>(own_images),
                     .scale = p.grad_scaler ? scaler.scale_factor() : 1.0, .skipped = summary.skipped_steps});
      }
      em.seconds = seconds_since(start);
      bar.finish();
      train::sync_running_stats(dp, net);  // the ranks' BatchNorm statistics, averaged
      const auto eval_start = Clock::now();
      em.test_accuracy = dp.is_main() ? evaluate(net, test_loader, p) : 0.0;  // the replicas are identical
      em.eval_seconds = seconds_since(eval_start);
      em.train_loss = train::sum_over_ranks(dp, loss_sum) / static_cast<double>(images);
      em.img_per_s = static_cast<double>(images) / em.seconds;
      em.skipped_steps = summary.skipped_steps - skipped_before;
      metrics.epoch(em);
      summary.add(em, images);
      train::print_epoch(em, opts.epochs);
      if (!opts.save.empty() && dp.is_main()) mg::io::save_checkpoint(opts.save, checkpoint());
    }
    summary.total_seconds = seconds_since(run_start);
    summary.total_steps = step;
    train::print_summary(summary);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_fashion_mnist: training failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
