// options.hpp — the command line of train_fashion_mnist (Boost.Program_options).
//
//   Options opts;
//   if (auto code = parse_options(argc, argv, opts)) return *code;   // --help: 0, a bad value: 2
//   opts.precision.autocast;   // what --precision / --amp resolved to
//
// Every value is checked here, so the training code can trust it; a bad one
// prints what was expected and exits with code 2 (as a usage error).
#pragma once

#include <boost/program_options.hpp>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <mixgrad/mixgrad.hpp>
#include <optional>
#include <string>
#include <vector>

namespace train {

namespace mg = mixgrad;

inline constexpr int kUsageError = 2;

/// What --precision and --amp resolve to.
struct Precision {
  std::string name = "fp32";          // fp32, bf16 or fp16
  bool autocast = false;              // run the step inside mg::amp::autocast
  mg::DType low = mg::DType::bfloat16;  // autocast's low-precision dtype
  bool grad_scaler = false;           // scale the loss with mg::amp::GradScaler
};

struct Options {
  std::string model = "cnn";
  Precision precision;
  int epochs = 3;
  int64_t batch_size = 128;
  double lr = 0.05;  // resolved from --optimizer when not given
  std::string optimizer = "sgd";
  int accumulate = 1;
  int64_t growth_interval = 2000;  // GradScaler
  uint64_t seed = 0;
  int threads = 2;
  std::string data_dir = std::string(mg::data::FashionMNIST::kDefaultRoot);
  std::string metrics;  // empty: no CSV
  int64_t limit_train = 0;
  std::string schedule = "cosine";
  std::string save;    // checkpoint directory; empty: no checkpoints
  std::string resume;  // checkpoint directory to continue from; empty: a fresh run
  int stop_after = 0;  // stop after this epoch (0: run all --epochs)
  int64_t checkpoint_every = 0;  // optimizer steps between checkpoints (0: at epoch ends only)
  bool distributed = false;  // data parallel over the processes of mpirun
  mg::Device device = mg::Device::cpu();  // --device: model, batches and the step
  bool cuda_graph = false;  // --cuda-graph: the step captured once as a CUDA graph and replayed (captured.hpp)
};

namespace detail {

inline void require_one_of(const std::string& flag, const std::string& value, const std::vector<std::string>& allowed) {
  for (const auto& a : allowed)
    if (value == a) return;
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  throw boost::program_options::error("--" + flag + " must be one of " + list + " (got '" + value + "')");
}

inline void require(bool ok, const std::string& message) {
  if (!ok) throw boost::program_options::error(message);
}

// --amp and --precision into one Precision: bf16 / fp16 imply autocast, --amp
// adds the GradScaler (with bf16 unless a precision is named), fp16 always has it.
// On CUDA, --amp means fp16 (tensor cores), on the CPU bf16.
inline Precision resolve_precision(const std::optional<std::string>& precision, bool amp, bool cuda = false) {
  Precision p;
  p.name = precision.value_or(amp ? (cuda ? "fp16" : "bf16") : "fp32");
  require_one_of("precision", p.name, {"fp32", "bf16", "fp16"});
  require(!(amp && p.name == "fp32"), "--amp needs a 16-bit precision: drop --precision fp32, or use bf16 / fp16");
  p.autocast = p.name != "fp32";
  p.low = p.name == "fp16" ? mg::DType::float16 : mg::DType::bfloat16;
  p.grad_scaler = amp || p.name == "fp16";
  return p;
}

// "cpu", "cuda" (device 0) or "cuda:N" (mg::parse_device). Whether the
// device exists is checked by main, which reports a missing one as a DeviceError.
inline mg::Device parse_device(const std::string& s) {
  try {
    return mg::parse_device(s);
  } catch (const mg::ValueError&) {
    throw boost::program_options::error("--device must be cpu, cuda or cuda:N (got '" + s + "')");
  }
}

}  // namespace detail

namespace detail {

// The options and their help; --precision and --lr are optional (their
// defaults depend on other options).
inline boost::program_options::options_description describe(Options& opts, std::optional<std::string>& precision,
                                                            std::optional<double>& lr) {
  namespace po = boost::program_options;
  po::options_description desc(
      "train_fashion_mnist: train an MLP, a CNN or a small ResNet on Fashion-MNIST,\n"
      "in float32 or with automatic mixed precision (autocast + GradScaler).\n\nOptions",
      100, 50);
  // clang-format off
  desc.add_options()
    ("help,h", "show this help and exit")
    ("model", po::value(&opts.model)->default_value(opts.model),
     "mlp (784-1024-1024-10), cnn (2 x conv3x3+BN+ReLU+maxpool, 3136-128-10) or "
     "resnet (6 residual BasicBlocks, 16/32/64 channels)")
    ("precision", po::value<std::string>()->notifier([&](const std::string& v) { precision = v; }),
     "fp32, bf16 or fp16. bf16 / fp16 run the step inside autocast: matmul and conv in 16 bits, "
     "losses, softmax and reductions in float32, parameters stay float32. fp16 always uses the "
     "GradScaler. Default: fp32, or bf16 with --amp")
    ("amp", po::bool_switch(), "automatic mixed precision: autocast + GradScaler (loss scaling, "
     "overflowing steps skipped); bf16 on the CPU, fp16 on CUDA, unless --precision says otherwise")
    ("device", po::value<std::string>()->default_value("cpu"),
     "cpu, cuda (device 0) or cuda:N: where the model, the batches (copied through pinned memory) "
     "and the step live. A CUDA device this process cannot use is an error (exit 1)")
    ("cuda-graph", po::bool_switch(&opts.cuda_graph),
     "capture the whole step (forward, backward, optimizer, scale update, schedule) once as a CUDA "
     "graph and replay it for every batch (mg::cuda::CapturedStep); needs --device cuda[:N]; the "
     "last partial batch of each epoch is dropped; not with --accumulate, --save, --resume, "
     "--metrics or --distributed")
    ("epochs", po::value(&opts.epochs)->default_value(opts.epochs), "passes over the training set")
    ("batch-size", po::value(&opts.batch_size)->default_value(opts.batch_size),
     "images per batch (per micro-batch with --accumulate)")
    ("lr", po::value<double>()->notifier([&](double v) { lr = v; }),
     "peak learning rate. Default: 0.05 for sgd, 0.001 for adam / adamw")
    ("optimizer", po::value(&opts.optimizer)->default_value(opts.optimizer),
     "sgd (momentum 0.9), adam or adamw (weight decay 0.01)")
    ("accumulate", po::value(&opts.accumulate)->default_value(opts.accumulate),
     "k: one optimizer step per k batches, gradients accumulated (the GradScaler's manual gear: "
     "scale, accumulate, unscale once, update). The effective batch is k x batch-size")
    ("growth-interval", po::value(&opts.growth_interval)->default_value(opts.growth_interval),
     "GradScaler: clean steps before the loss scale doubles (an overflow halves it and skips the "
     "step); 0 keeps the scale static")
    ("schedule", po::value(&opts.schedule)->default_value(opts.schedule),
     "learning rate over the run: cosine (from lr down to 0, per step) or constant")
    ("seed", po::value(&opts.seed)->default_value(opts.seed), "seed of the initialisation and the shuffling")
    ("threads", po::value(&opts.threads)->default_value(opts.threads), "CPU threads")
    ("data-dir", po::value(&opts.data_dir)->default_value(opts.data_dir),
     "directory holding the four .gz files of Fashion-MNIST (package dataset-fashion-mnist)")
    ("metrics", po::value(&opts.metrics)->value_name("FILE.csv"),
     "write per-step metrics (step, epoch, loss, scale_factor, lr, skipped) to FILE.csv and "
     "per-epoch metrics to FILE.epochs.csv; plot them with scripts/plot_metrics.py")
    ("limit-train", po::value(&opts.limit_train)->default_value(opts.limit_train),
     "train on the first N images only (0: all 60000); for quick runs")
    ("save", po::value(&opts.save)->value_name("DIR"),
     "write checkpoints (model, optimizer, GradScaler, schedule, random generator, the loader's "
     "position and shuffling, the metrics so far) to DIR/checkpoint-<step>.safetensors at the end of "
     "every epoch and every --checkpoint-every steps, atomically; the newest two are kept")
    ("checkpoint-every", po::value(&opts.checkpoint_every)->default_value(opts.checkpoint_every)->value_name("N"),
     "with --save, also a checkpoint every N optimizer steps (0: at epoch ends only)")
    ("resume", po::value(&opts.resume)->value_name("DIR"),
     "continue from the latest checkpoint in DIR, from the very step it was written at (mid-epoch "
     "too, e.g. after the process was killed); give the same options as the run that wrote it. The "
     "result is bit-identical to a run never stopped (same machine and --threads)")
    ("stop-after", po::value(&opts.stop_after)->default_value(opts.stop_after)->value_name("N"),
     "stop after epoch N as if interrupted (0: run all --epochs); with --save, --resume continues")
    ("distributed", po::bool_switch(&opts.distributed),
     "data parallel over the processes of mpirun (mpirun -np N train_fashion_mnist --distributed): each "
     "process trains on its share of every epoch with --batch-size images per step, gradients averaged "
     "over the processes; only rank 0 prints, evaluates and writes files");
  // clang-format on
  return desc;
}

// The checks, and the defaults that depend on other options; a po::error
// (exit code kUsageError) for a bad value.
inline void resolve(Options& opts, const boost::program_options::variables_map& vm,
                    const std::optional<std::string>& precision, const std::optional<double>& lr) {
  detail::require_one_of("model", opts.model, {"mlp", "cnn", "resnet"});
  detail::require_one_of("optimizer", opts.optimizer, {"sgd", "adam", "adamw"});
  detail::require_one_of("schedule", opts.schedule, {"cosine", "constant"});
  opts.device = detail::parse_device(vm["device"].as<std::string>());
  detail::require(!opts.cuda_graph || opts.device.is_cuda(),
                  "--cuda-graph needs a CUDA device (--device cuda or cuda:N): it captures the step as a CUDA "
                  "graph, which the CPU has no equivalent of");
  detail::require(!opts.cuda_graph || (opts.accumulate == 1 && opts.save.empty() && opts.resume.empty() &&
                                       opts.metrics.empty() && !opts.distributed),
                  "--cuda-graph runs its own loop: it does not take --accumulate, --save, --resume, --metrics "
                  "or --distributed");
  opts.precision = detail::resolve_precision(precision, vm["amp"].as<bool>(), opts.device.is_cuda());
  opts.lr = lr.value_or(opts.optimizer == "sgd" ? 0.05 : 1e-3);
  detail::require(std::isfinite(opts.lr) && opts.lr > 0, "--lr must be a positive number");
  detail::require(opts.epochs >= 1, "--epochs must be at least 1");
  detail::require(opts.batch_size >= 1, "--batch-size must be at least 1");
  detail::require(opts.accumulate >= 1, "--accumulate must be at least 1");
  detail::require(opts.growth_interval >= 0, "--growth-interval must be 0 (static scale) or positive");
  detail::require(opts.threads >= 1, "--threads must be at least 1");
  detail::require(opts.limit_train >= 0, "--limit-train must be 0 (all) or a positive count");
  detail::require(opts.stop_after >= 0, "--stop-after must be 0 (run all epochs) or a positive epoch");
  detail::require(opts.checkpoint_every >= 0, "--checkpoint-every must be 0 (epoch ends) or a positive count");
}

inline const char* const kExamples =
      "Examples:\n"
      "  train_fashion_mnist                                 # CNN, fp32, 3 epochs\n"
      "  train_fashion_mnist --amp                           # the same with bf16 autocast + GradScaler\n"
      "  train_fashion_mnist --model resnet --precision fp16 --accumulate 4 --batch-size 32\n"
      "  train_fashion_mnist --limit-train 2048 --epochs 1   # a smoke run of a few seconds\n"
      "  train_fashion_mnist --device cuda --amp             # on GPU 0, fp16 autocast + GradScaler\n"
      "  train_fashion_mnist --save ckpt --stop-after 1      # epoch 1 of 3, checkpointed ...\n"
      "  train_fashion_mnist --save ckpt --resume ckpt       # ... and epochs 2 and 3\n"
      "  mpirun -np 2 train_fashion_mnist --distributed --threads 1 --batch-size 64   # 2 processes\n\n"
      "Exit codes: 0 done, 1 training failed or no such device, 2 bad option or missing data set.\n";

}  // namespace detail

/// Parses the command line into `opts`. Returns the exit code when the
/// program should stop now (0 after --help, kUsageError after a bad option),
/// std::nullopt to go on.
inline std::optional<int> parse_options(int argc, char** argv, Options& opts) {
  namespace po = boost::program_options;
  std::optional<std::string> precision;
  std::optional<double> lr;
  const po::options_description desc = detail::describe(opts, precision, lr);
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << desc << "\n" << detail::kExamples;
      return 0;
    }
    po::notify(vm);
    detail::resolve(opts, vm, precision, lr);
  } catch (const po::error& e) {
    std::cerr << "train_fashion_mnist: " << e.what() << "\nRun train_fashion_mnist --help for the options.\n";
    return kUsageError;
  }
  return std::nullopt;
}

}  // namespace train
