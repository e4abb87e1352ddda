// report.hpp — what train_fashion_mnist tells the user: the data set (or
// why it is missing), the run's settings, one line per epoch, a summary.
//
//   auto data = load_fashion_mnist(dir, limit);   // nullopt (message printed) when missing
//   print_header(opts, net, train_images, test_images);
//   print_epoch(metrics, epochs);                 // "epoch 1/3  train loss 0.4513  test accuracy ..."
//   print_summary(runner.history(), steps, seconds);
#pragma once

#include <cstdint>
#include <cstdio>
#include <mixgrad/mixgrad.hpp>
#include <optional>
#include <string>

#include "train_fashion_mnist/options.hpp"

namespace train {

struct FashionMNISTData {
  mg::data::TensorDataset train;  // the first --limit-train images, or all
  mg::data::TensorDataset test;
};

/// Reads both splits from `dir`. A missing or unreadable data set prints
/// how to get it and returns nullopt.
inline std::optional<FashionMNISTData> load_fashion_mnist(const std::string& dir, int64_t limit_train) {
  try {
    mg::data::TensorDataset train_set = mg::data::FashionMNIST(dir, mg::data::Split::train);
    mg::data::FashionMNIST test_set(dir, mg::data::Split::test);
    if (limit_train > 0 && limit_train < train_set.size()) train_set = train_set.narrow(0, limit_train);
    return FashionMNISTData{train_set, test_set};
  } catch (const mg::IOError& e) {
    std::fprintf(stderr,
                 "train_fashion_mnist: cannot read the Fashion-MNIST data set in %s\n  (%s)\n"
                 "Install it with the Debian package dataset-fashion-mnist:\n"
                 "  sudo apt-get install dataset-fashion-mnist\n"
                 "or pass --data-dir DIR, DIR holding train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,\n"
                 "t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz.\n",
                 dir.c_str(), e.what());
    return std::nullopt;
  }
}

/// "fp32", "bf16 autocast", "bf16 autocast + GradScaler".
inline std::string describe(const Precision& p) {
  if (!p.autocast) return p.name;
  return p.name + " autocast" + (p.grad_scaler ? " + GradScaler" : "");
}

inline void print_header(const Options& o, const mg::nn::Module& net, int64_t train_images, int64_t test_images) {
  int64_t params = 0;
  for (const auto& t : net.parameters()) params += t.numel();
  std::printf("Fashion-MNIST: %lld training and %lld test images from %s\n", static_cast<long long>(train_images),
              static_cast<long long>(test_images), o.data_dir.c_str());
  std::printf("model %s (%lld parameters), %s, %s lr %g (%s), batch %lld", o.model.c_str(),
              static_cast<long long>(params), describe(o.precision).c_str(), o.optimizer.c_str(), o.lr,
              o.schedule.c_str(), static_cast<long long>(o.batch_size));
  if (o.accumulate > 1)
    std::printf(" x %d accumulated (%lld per step)", o.accumulate, static_cast<long long>(o.batch_size * o.accumulate));
  std::printf(", %d epoch%s, %d threads, seed %llu\n", o.epochs, o.epochs == 1 ? "" : "s", o.threads,
              static_cast<unsigned long long>(o.seed));
  if (o.device.type() == mg::DeviceType::cpu) {
    const mg::cpu::Capabilities caps = mg::cpu::capabilities();
    std::printf("CPU: %s\n", mg::cpu::describe(caps).c_str());
    // Where the CPU has no 16-bit arithmetic faster than float32, autocast
    // stores activations in 16 bits and computes its products in float32:
    // memory, not speed.
    if (o.precision.autocast && !mg::cpu::has_fast_math(o.precision.low)) {
      const std::string low(mg::to_string(o.precision.low));
      const bool slow_units = o.precision.low == mg::DType::bfloat16 && caps.bf16_dot_speedup > 0 && !caps.amx_bf16;
      const std::string why =
          !caps.max_isa.empty() ? "MIXGRAD_MAX_CPU_ISA=" + caps.max_isa + " turns 16-bit arithmetic off"
          : slow_units          ? "this CPU's " + low + " dot products are slower than its float32 ones"
                                : "this CPU has no " + low + " arithmetic";
      std::printf("note: %s: autocast halves activation memory and computes in float32, at about float32's speed\n",
                  why.c_str());
    }
  }
  std::fflush(stdout);
}

/// "epoch 1/3  train loss 0.4513  test accuracy 88.12%  12.3 s (+ 0.9 s test)  4870 img/s"
inline void print_epoch(const mg::train::Metrics& m, int epochs) {
  std::printf("epoch %d/%d  train loss %.4f  test accuracy %.2f%%  %.1f s (+ %.1f s test)  %.0f img/s",
              static_cast<int>(m.at("epoch")), epochs, m.at("train_loss"), 100.0 * m.at("test_accuracy"),
              m.at("seconds"), m.at("eval_seconds"), m.at("img_per_s"));
  if (m.at("skipped_steps") > 0) std::printf("  %.0f steps skipped", m.at("skipped_steps"));
  std::printf("\n");
  std::fflush(stdout);
}

/// The run's totals, from the runner's history (every epoch, resumed ones too).
inline void print_summary(const std::vector<mg::train::Metrics>& history, int64_t steps, double total_seconds) {
  if (history.empty()) return;
  double best = -1.0, train_seconds = 0.0, images = 0.0, skipped = 0.0;
  int best_epoch = 0;
  for (const auto& m : history) {
    if (m.at("test_accuracy") > best) {
      best = m.at("test_accuracy");
      best_epoch = static_cast<int>(m.at("epoch"));
    }
    train_seconds += m.at("seconds");
    images += m.at("img_per_s") * m.at("seconds");
    skipped += m.at("skipped_steps");
  }
  std::printf("done: final test accuracy %.2f%%, best %.2f%% (epoch %d)\n", 100.0 * history.back().at("test_accuracy"),
              100.0 * best, best_epoch);
  std::printf("      %s in total (%.1f s training), %.0f img/s on average, %.0f of %lld steps skipped\n",
              mg::train::format_duration(total_seconds).c_str(), train_seconds,
              train_seconds > 0 ? images / train_seconds : 0.0, skipped, static_cast<long long>(steps));
  std::fflush(stdout);
}

}  // namespace train
