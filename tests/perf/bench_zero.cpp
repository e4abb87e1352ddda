// Benchmark: sharded optimizer state (distributed::ShardedOptimizer, ZeRO
// stages 1 and 2) against plain data parallel, Adam on an MLP (--model mlp,
// the default), ResNet-18 (--model resnet18, 10 classes, --width-pixel
// square images) or a GPT-style stack (--model gpt: --layers pre-norm
// transformer layers of --width, heads of 64, on --context positions,
// regressed onto random targets). Not a test.
// Each mode is its own job, so each peak RSS is its own; tests/perf/bench_zero.sh
// runs them all, PyTorch's counterpart (bench_zero_torch.py) and the loss
// comparison:
//
//   OMP_NUM_THREADS=1 mpirun -np 2 build/tests/perf/bench_zero --mode plain --steps 500 --losses plain.txt
//   OMP_NUM_THREADS=1 mpirun -np 2 build/tests/perf/bench_zero --mode zero1 --steps 500 --losses zero1.txt
//   OMP_NUM_THREADS=1 mpirun -np 2 build/tests/perf/bench_zero --mode zero2 --steps 500 --losses zero2.txt
//
// zero1 and zero2 reduce-scatter the gradients during backward
// (ShardedOptimizer::attach); zero1-step and zero2-step in the step, as
// before attach existed.
//
// Per rank it prints the optimizer state bytes (Adam's two moments, of the
// whole model or of the rank's shard), the peak resident memory (VmHWM) and
// its growth over the process's resident memory before the model existed,
// and the mean step time (forward, backward, gradient reduction, update)
// after 5 warm-up steps. Rank 0 writes its loss per step to --losses. The
// global batch (--batch, 64) is cut among the ranks and the gradients
// averaged, so every mode and world size trains the same model.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mixgrad/distributed.hpp"
#include "mixgrad/mixgrad.hpp"
#include "mixgrad/models/resnet.hpp"
#include "cpu_line.hpp"

namespace mg = mixgrad;
namespace F = mixgrad::F;
namespace D = mixgrad::distributed;

namespace {

struct Args {
  std::string mode = "plain";  // plain, zero1, zero2, zero1-step, zero2-step
  std::string model = "mlp";   // mlp, resnet18, gpt
  int steps = 100;
  int64_t width = 1024, layers = 8, batch = 64, context = 128;  // context: gpt's sequence length
  int64_t bucket_kib = 4096;  // ShardingOptions::bucket_bytes
  std::string losses;
};

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--mode plain|zero1|zero2|zero1-step|zero2-step] [--model mlp|resnet18|gpt] [--steps N] [--width W] [--layers L] "
               "[--batch B] [--context T] [--bucket-kib K] "
               "[--losses FILE]\n",
               argv0);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 >= argc) usage(argv[0]);
    const std::string v = argv[i + 1];
    if (k == "--mode") a.mode = v;
    else if (k == "--model") a.model = v;
    else if (k == "--steps") a.steps = std::stoi(v);
    else if (k == "--width") a.width = std::stoll(v);
    else if (k == "--layers") a.layers = std::stoll(v);
    else if (k == "--batch") a.batch = std::stoll(v);
    else if (k == "--context") a.context = std::stoll(v);
    else if (k == "--bucket-kib") a.bucket_kib = std::stoll(v);
    else if (k == "--losses") a.losses = v;
    else usage(argv[0]);
  }
  if (a.mode != "plain" && a.mode != "zero1" && a.mode != "zero2" && a.mode != "zero1-step" &&
      a.mode != "zero2-step")
    usage(argv[0]);
  if (a.model != "mlp" && a.model != "resnet18" && a.model != "gpt") usage(argv[0]);
  if (a.model == "gpt" && (a.width < 64 || a.width % 64 != 0)) usage(argv[0]);  // heads of 64
  return a;
}

// A field of /proc/self/status in MiB ("VmHWM", "VmRSS").
double status_mib(const std::string& field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1)) / 1024.0;
  return 0.0;
}

// The optimizer and its gradient path for one mode.
struct Training {
  std::vector<mg::Tensor> params;
  std::optional<mg::models::ResNet> resnet;
  std::optional<mg::nn::Sequential> gpt;  // pre-norm transformer layers, heads of 64, GELU, no dropout
  mg::autodiff::GradManager gm;
  std::unique_ptr<mg::optim::Adam> plain;
  std::unique_ptr<D::ShardedOptimizer> sharded;

  Training(const D::ProcessGroup& g, const Args& a) {
    mg::manual_seed(0);  // the same model on every rank and in every mode
    if (a.model == "resnet18") {
      resnet.emplace(mg::models::resnet18({.num_classes = 10}));
      params = resnet->parameters();
    }
    if (a.model == "gpt") {
      gpt.emplace();
      for (int64_t l = 0; l < a.layers; ++l)
        gpt->push_back(mg::nn::TransformerEncoderLayer(
            a.width, a.width / 64,
            {.dim_feedforward = 4 * a.width, .dropout = 0.0, .activation = mg::nn::Activation::gelu,
             .layer_norm_eps = 1e-5, .batch_first = true, .norm_first = true, .bias = true}));
      params = gpt->parameters();
    }
    for (int64_t l = 0; !resnet && !gpt && l < a.layers; ++l) {
      params.push_back(mg::normal({a.width, a.width}, 0.0, 1.0 / std::sqrt(static_cast<double>(a.width))));
      params.push_back(mg::zeros({a.width}));
    }
    if (a.mode == "plain") {
      gm.attach(params, {D::make_allreduce_callback(gm, g, "mean")});
      plain = std::make_unique<mg::optim::Adam>(params, mg::optim::AdamOptions{.lr = 1e-3});
    } else {
      const bool in_step = a.mode.ends_with("-step");
      if (in_step) gm.attach(params);
      sharded = std::make_unique<D::ShardedOptimizer>(
          g, params,
          [](std::vector<mg::Tensor> s) {
            return std::make_unique<mg::optim::Adam>(std::move(s), mg::optim::AdamOptions{.lr = 1e-3});
          },
          D::ShardingOptions{.stage = a.mode.starts_with("zero1") ? 1 : 2,
                             .op = "mean",
                             .master_weights = false,
                             .bucket_bytes = a.bucket_kib << 10});
      if (!in_step) sharded->attach(gm);
    }
  }

  // One step on this rank's rows; returns its loss (not read from the device).
  mg::Tensor step(const mg::Tensor& x, const mg::Tensor& y) {
    mg::Tensor loss;
    {
      auto recording = gm.record();
      if (resnet || gpt) {
        loss = resnet ? F::cross_entropy((*resnet)(x), y) : F::mse_loss((*gpt)(x), y);
        gm.backward(loss);
        return finish(loss);
      }
      mg::Tensor h = x;
      for (size_t l = 0; l + 2 < params.size(); l += 2) h = F::relu(F::linear(h, params[l], params[l + 1]));
      h = F::linear(h, params[params.size() - 2], params.back());
      loss = F::mse_loss(h, y);
      gm.backward(loss);
    }
    return finish(loss);
  }

  mg::Tensor finish(const mg::Tensor& loss) {
    if (plain) plain->step().clear_grad();
    else sharded->step().clear_grad();
    return loss;
  }

  int64_t state_bytes() const {
    if (sharded) return sharded->state_bytes();
    int64_t bytes = 0;
    for (const auto& [key, t] : plain->state_dict())
      if (key.rfind("state.", 0) == 0) bytes += t.numel() * mg::element_size(t.dtype());
    return bytes;
  }
};

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const auto g = D::init_process_group();
  const double rss_before = status_mib("VmRSS");
  Training t(g, a);
  // This rank's rows of a fixed global batch: a regression onto a random
  // linear map of x (MLP), or random images and labels (ResNet-18).
  const int64_t lo = a.batch * g.rank() / g.world_size(), hi = a.batch * (g.rank() + 1) / g.world_size();
  mg::manual_seed(7);
  mg::Tensor x_all, y_all;
  if (a.model == "resnet18") {
    x_all = mg::normal({a.batch, 3, a.width, a.width});
    y_all = F::astype(F::argmax(mg::normal({a.batch, 10}), 1), mg::DType::int64);
  } else if (a.model == "gpt") {  // a regression of random sequences onto random targets
    x_all = mg::normal({a.batch, a.context, a.width});
    y_all = F::mul(mg::normal({a.batch, a.context, a.width}), 0.5);
  } else {
    x_all = mg::normal({a.batch, a.width});
    y_all = F::tanh(F::matmul(x_all, mg::normal({a.width, a.width}, 0.0, 0.05)));
  }
  const mg::Tensor x = F::narrow(x_all, 0, lo, hi - lo).contiguous(), y = F::narrow(y_all, 0, lo, hi - lo).contiguous();

  constexpr int kWarmup = 5;
  std::vector<mg::Tensor> losses;
  double seconds = 0.0;
  for (int s = 0; s < a.steps + kWarmup; ++s) {
    g.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    losses.push_back(t.step(x, y));
    if (s >= kWarmup) seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double peak = status_mib("VmHWM");
  if (g.rank() == 0) {
    perf::print_cpu_line();
    int64_t n = 0;
    for (const mg::Tensor& p : t.params) n += p.numel();
    const std::string model =
        a.model == "resnet18" ? "ResNet-18 on " + std::to_string(a.width) + "x" + std::to_string(a.width) + " images"
        : a.model == "gpt"    ? std::to_string(a.layers) + " transformer layers of width " + std::to_string(a.width) +
                                 ", context " + std::to_string(a.context)
                              : std::to_string(a.layers) + " x " + std::to_string(a.width) + " MLP";
    std::printf("%s on %d ranks: %s (%lld parameters), Adam, global batch %lld, %d steps\n", a.mode.c_str(),
                g.world_size(), model.c_str(), static_cast<long long>(n), static_cast<long long>(a.batch), a.steps);
    std::fflush(stdout);
  }
  for (int r = 0; r < g.world_size(); ++r) {
    g.barrier();
    if (r == g.rank())
      std::printf("rank %d: optimizer state %.2f MiB, peak RSS %.1f MiB (+%.1f over the start), %.2f ms/step\n", r,
                  static_cast<double>(t.state_bytes()) / (1 << 20), peak, peak - rss_before,
                  1e3 * seconds / a.steps);
    std::fflush(stdout);
  }
  if (g.rank() == 0 && !a.losses.empty()) {
    std::ofstream out(a.losses);
    for (const mg::Tensor& l : losses) out << l.item<double>() << '\n';
  }
  g.barrier();
  return 0;
}
