// train_fashion_mnist — the first program to run: train an MLP, a CNN or a
// small ResNet on Fashion-MNIST, in float32 or with automatic mixed
// precision, through mg::train::Runner, which owns the loop:
//
//   mg::train::Runner runner(net, opt);                  // cross entropy, classification steps
//   runner.scaler = mg::amp::GradScaler();               // --amp: autocast + loss scaling
//   runner.scheduler = std::make_shared<mg::optim::CosineAnnealingLR>(opt, total_steps);
//   runner.add_loader("train", train_loader);
//   runner.add_loader("test", test_loader);
//   runner.train_config({.epochs = 3, .checkpoint_dir = "ckpt", .accumulate = k, ...});
//   runner.run();
//
// Each optimizer step is MegEngine's manual gear: k micro-batches (k = 1
// without --accumulate) each record their forward and call
// scaler.backward(gm, loss / k, {}, {.unscale_grad = false, ...}), then one
// scaler.unscale, scaler.update and opt.step (which skips an overflowed step).
//
//   train_fashion_mnist                  # CNN, fp32, SGD + cosine lr, 3 epochs
//   train_fashion_mnist --amp            # bf16 autocast + GradScaler
//   train_fashion_mnist --device cuda --amp --cuda-graph   # the step as one CUDA graph (captured.hpp)
//   train_fashion_mnist --help           # every option
//   train_fashion_mnist --save ckpt --checkpoint-every 100   # kill it at any time, then
//   train_fashion_mnist --save ckpt --resume ckpt            # continue from the step it reached
//   mpirun -np 2 train_fashion_mnist --distributed --threads 1   # data parallel (distributed.hpp)
//
// The data comes from `apt-get install dataset-fashion-mnist` (or --data-dir).
#include <chrono>
#include <cstdio>
#include <memory>
#include <mixgrad/mixgrad.hpp>
#include <string>
#include <vector>

#include "models.hpp"
#include "train_fashion_mnist/captured.hpp"
#include "train_fashion_mnist/distributed.hpp"
#include "train_fashion_mnist/options.hpp"
#include "train_fashion_mnist/report.hpp"

namespace mg = mixgrad;

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

// Before the data set loads: a CUDA device that is not there, said at once.
bool device_exists(const mg::Device& device) {
  if (!device.is_cuda() || device.index() < mg::cuda::device_count()) return true;
  const int count = mg::cuda::device_count();
  const std::string why = "--device " + mg::to_string(device) + ": " +
                          (count == 0 ? std::string("this process sees no CUDA device (no GPU or driver, or a build "
                                                    "without CUDA)")
                                      : "only " + std::to_string(count) + " CUDA device(s) exist");
  std::fprintf(stderr, "train_fashion_mnist: DeviceError: %s\n", mg::DeviceError(why).what());
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  train::Options opts;
  if (auto code = train::parse_options(argc, argv, opts)) return *code;
  const train::Precision& p = opts.precision;
  if (!device_exists(opts.device)) return 1;
  try {
    train::DataParallel dp;
    if (!train::start_data_parallel(opts, dp)) return train::kUsageError;
    mg::set_num_threads(opts.threads);
    mg::manual_seed(opts.seed);
    auto data = train::load_fashion_mnist(opts.data_dir, opts.limit_train);
    if (!data) return train::kUsageError;
    auto net = make_model(opts.model);
    net.to(opts.device);
    auto optimizer = make_optimizer(opts, net.parameters());
    if (opts.cuda_graph) {  // its own loop: the step captured once, replayed per batch (captured.hpp)
      train::print_header(opts, net, data->train.size(), data->test.size());
      train::run_captured(opts, net, *optimizer, data->train, data->test);
      return 0;
    }

    mg::train::Runner runner(net, *optimizer);
    // A disabled scaler (--precision bf16 alone): autocast without loss scaling.
    if (p.autocast) runner.scaler = mg::amp::GradScaler({.growth_interval = opts.growth_interval, .enabled = p.grad_scaler});
    runner.add_loader("train", train::make_train_loader(dp, data->train, opts));
    runner.add_loader("test", mg::data::DataLoader(data->test, {.batch_size = 500, .device = opts.device}));
    const int64_t steps_per_epoch = (runner.loader("train").size() + opts.accumulate - 1) / opts.accumulate;
    if (opts.schedule == "cosine")  // from lr to 0 over the run, per optimizer step
      runner.scheduler = std::make_shared<mg::optim::CosineAnnealingLR>(*optimizer, steps_per_epoch * opts.epochs);
    runner.train_config({.epochs = opts.epochs,
                         .checkpoint_dir = opts.save,
                         .checkpoint_every = opts.checkpoint_every,
                         .accumulate = opts.accumulate,
                         .max_steps = opts.stop_after * steps_per_epoch,
                         .test_each_epoch = true,
                         .autocast_dtype = p.low,
                         .verbose = false,  // the epoch lines below
                         .metrics_csv = dp.is_main() ? opts.metrics : "",
                         // The runner reads its device-side sums (loss, skipped steps) every 50
                         // steps and at each epoch's end: a read per step would make the host wait
                         // for the GPU every step (docs/runner.md, "No step waits for the device").
                         .log_every = 50,
                         .main_process = dp.is_main()});
    train::attach_data_parallel(dp, runner.grad_manager(), net, runner.scaler ? &*runner.scaler : nullptr);
    runner.on_epoch_begin([&](mg::train::Runner&, int64_t epoch) { train::begin_epoch(dp, epoch - 1); });
    runner.on_train_epoch_end([&](mg::train::Runner&, int64_t) { train::sync_running_stats(dp, net); });
    runner.on_epoch_end([&](mg::train::Runner&, const mg::train::Metrics& m) {
      if (dp.is_main()) train::print_epoch(m, opts.epochs);
    });
    if (!opts.resume.empty()) {
      runner.load_checkpoint(opts.resume);
      std::printf("resumed from %s at step %lld\n", opts.resume.c_str(), static_cast<long long>(runner.global_step()));
    }
    if (dp.is_main()) train::print_header(opts, net, data->train.size(), data->test.size());
    if (dp.on)
      std::printf("data parallel: %d processes x batch %lld (%lld images per step)\n", dp.world,
                  static_cast<long long>(opts.batch_size), static_cast<long long>(opts.batch_size * dp.world));

    const auto start = std::chrono::steady_clock::now();
    runner.run();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (dp.is_main()) train::print_summary(runner.history(), runner.global_step(), seconds);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_fashion_mnist: training failed: %s\n", e.what());
    return 1;
  }
  return 0;
}
