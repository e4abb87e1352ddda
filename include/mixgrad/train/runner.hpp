// mixgrad/train/runner.hpp — the training loop, written once: Enchanter's
// and Lightning's Runner in C++.
//
//   mg::train::Runner runner(net, optimizer);            // criterion: cross_entropy
//   runner.scaler = mg::amp::GradScaler();                // the whole of turning AMP on
//   runner.add_loader("train", train_loader);
//   runner.add_loader("test", test_loader);
//   runner.train_config({.epochs = 3, .checkpoint_dir = "ckpt", .checkpoint_every = 100});
//   runner.run();
//
// A custom runner overrides a step; the runner records it, does the
// backward (scaled when `scaler` is set) and the optimizer step:
//
//   struct MyRunner : mg::train::Runner {
//     using Runner::Runner;
//     mg::train::StepOutput train_step(const mg::data::Batch& b) override {
//       mg::amp::autocast scope;                          // as Enchanter writes it (the runner
//       auto loss = mg::F::cross_entropy(model()(b.images), b.labels);  // already opened one)
//       return {{"loss", loss}};
//     }
//   };
//
// One optimizer step is: for each of `accumulate` micro-batches, train_step
// inside gm.record() (and, with a scaler, inside autocast: bfloat16 on the
// CPU, float16 on CUDA, or config.autocast_dtype), then the backward of
// loss / accumulate (scaled, not yet unscaled, with a scaler); then unscale,
// clip_grad_norm (config.clip_grad_norm), the scale's update, the optimizer
// step (skipped by the optimizer when the scaler found inf / NaN), clear_grad
// and, per step or per epoch, the scheduler (per step, it does not advance
// on a skipped step). After each epoch the "val" loader (and, with
// test_each_epoch, "test") runs val_step / test_step in eval mode with nothing
// recorded; "test" runs once more at the end otherwise.
//
// Every value a step returns is averaged over the epoch's samples and kept
// in history() as "<loader>_<name>" ("train_loss", "val_accuracy", ...).
//
// No step waits for the device. The sums of the step's values, the skipped
// steps and the schedule (stepped with the scaler on the device, see
// lr_scheduler.hpp) stay on the device; the runner reads them every
// config.log_every optimizer steps, for the progress bar and the per-step
// CSV rows, and at each epoch's end and checkpoint. On a GPU each read is a
// synchronisation, which costs the overlap of host and device; on the CPU it
// is free. on_step_end runs after every step: its StepInfo reads a value
// only when the callback asks for it.
//
// Checkpoints (config.checkpoint_dir): every checkpoint_every optimizer steps
// and at each epoch's end, written atomically (a crash while writing leaves
// the previous one intact), holding the model, optimizer, scheduler, scaler,
// train loader's position and shuffle order, the global random generator,
// the runner's counters and the metrics so far. With config.resume, run()
// continues from the latest one exactly: the parameters at the end are bit
// for bit those of a run never stopped.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mixgrad/amp/grad_scaler.hpp"
#include "mixgrad/autodiff/grad_manager.hpp"
#include "mixgrad/data/data_loader.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::nn {
class Module;
}
namespace mixgrad::optim {
class Optimizer;
class LRScheduler;
}  // namespace mixgrad::optim

namespace mixgrad::train {

namespace detail {
class DeviceSums;
}

/// What a step returns: named 0-d tensors, {"loss", loss} at least for
/// train_step (Enchanter's `return {"loss": loss}`).
using StepOutput = std::map<std::string, Tensor>;
/// The loss of a batch: criterion(model output, labels).
using Criterion = std::function<Tensor(const Tensor& output, const Tensor& target)>;
/// One epoch's metrics by name: "epoch", "train_loss", "val_accuracy", "lr",
/// "seconds", "img_per_s", "skipped_steps", ...
using Metrics = std::map<std::string, double>;

/// Stop when a monitored metric stopped improving.
struct EarlyStopping {
  std::string monitor = "val_loss";  ///< a key of the epoch's Metrics
  int64_t patience = 3;              ///< epochs without improvement before stopping
  double min_delta = 0.0;            ///< an improvement is larger than this
  bool maximize = false;             ///< true for accuracies
};

enum class SchedulerInterval { step, epoch };

struct TrainConfig {
  int64_t epochs = 1;
  /// Where checkpoints go; empty: none are written.
  std::filesystem::path checkpoint_dir = {};
  /// Optimizer steps between checkpoints (0: only at each epoch's end).
  int64_t checkpoint_every = 0;
  /// How many of the newest checkpoints to keep (0: all).
  int64_t keep_checkpoints = 2;
  /// Continue from checkpoint_dir's latest checkpoint when there is one.
  bool resume = false;
  std::optional<EarlyStopping> early_stopping = std::nullopt;
  /// Micro-batches per optimizer step (gradient accumulation).
  int64_t accumulate = 1;
  /// Clip the gradients' global L2 norm to this (after unscaling).
  std::optional<double> clip_grad_norm = std::nullopt;
  SchedulerInterval scheduler_interval = SchedulerInterval::step;
  /// Stop after this many optimizer steps of the run (0: no limit).
  int64_t max_steps = 0;
  /// Run the "test" loader after every epoch, not once at the end.
  bool test_each_epoch = false;
  /// Autocast's low-precision dtype when a scaler is set (default: by device).
  std::optional<DType> autocast_dtype = std::nullopt;
  /// The progress bar (drawn only when stdout is a terminal).
  bool progress_bar = true;
  /// One line per epoch (and the final test) on stdout.
  bool verbose = true;
  /// Per-step rows to this CSV file, per-epoch rows to `<stem>.epochs.csv`.
  std::filesystem::path metrics_csv = {};
  /// Optimizer steps between the reads of the device-side metrics that the
  /// progress bar and the CSV rows show (1: after every step; see above).
  int64_t log_every = 50;
  /// False on every data-parallel rank but one: no checkpoints, output or CSV.
  bool main_process = true;
};

/// What on_step_end sees, right after each optimizer step. The values live
/// on the device: each accessor reads one (a synchronisation on a GPU).
struct StepInfo {
  int64_t step = 0;   ///< optimizer steps of the run so far (1-based for this one)
  int64_t epoch = 0;  ///< 1-based
  int64_t batch = 0;  ///< batches of this epoch so far

  /// The step's mean loss over its micro-batches.
  double loss() const;
  /// The loss scale its backward used (1 without a scaler).
  double scale() const;
  /// The learning rate of the optimizer's group 0 after the step (and after
  /// the scheduler's advance, when it steps per step).
  double lr() const;
  /// True when the scaler found inf / NaN: the optimizer did not step.
  bool skipped() const;

  /// Where the accessors read: 0-d tensors on the device (found_inf and
  /// lr_value undefined without a scaler / a device lr; host_lr then).
  Tensor loss_value, scale_value, found_inf, lr_value;
  double host_lr = 0.0;
};

class Runner {
 public:
  /// The runner uses `model` and `optimizer` (not copied: they must outlive
  /// it) and attaches the model's trainable parameters to its GradManager
  /// when run() starts, unless grad_manager() has attachments already (data
  /// parallel attaches its own).
  Runner(nn::Module& model, optim::Optimizer& optimizer, Criterion criterion = nullptr);
  virtual ~Runner();
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  /// Empty: float32. Set: autocast and this GradScaler.
  std::optional<amp::GradScaler> scaler;
  /// The learning-rate schedule of the optimizer, stepped per
  /// config.scheduler_interval; saved in checkpoints.
  std::shared_ptr<optim::LRScheduler> scheduler;

  /// Adds the loader "train", "val" or "test". StateError for a name added
  /// already, ValueError for another name; nothing changed.
  void add_loader(const std::string& name, data::DataLoader loader);
  void train_config(TrainConfig config);
  const TrainConfig& config() const { return config_; }

  /// Trains (resuming first with config.resume) and evaluates. StateError
  /// without a "train" loader; IOError for a checkpoint that does not fit
  /// (nothing changed). Returns when the epochs, max_steps, early stopping
  /// or stop() end the run.
  void run();
  /// Ends the run after the current step (from a callback).
  void stop() { stop_requested_ = true; }

  /// Writes a checkpoint of the run as it is now to `path` (a directory: its
  /// `checkpoint-<step>` file); returns the file.
  std::filesystem::path save_checkpoint(const std::filesystem::path& path);
  /// Loads a checkpoint of this run (a directory: its latest); IOError naming
  /// the file and what does not fit, with nothing changed.
  void load_checkpoint(const std::filesystem::path& path);

  /// The per-epoch step. The defaults: output = model(images), "loss" =
  /// criterion(output, labels); val / test add "accuracy" (argmax over dim 1).
  virtual StepOutput train_step(const data::Batch& batch);
  virtual StepOutput val_step(const data::Batch& batch);
  virtual StepOutput test_step(const data::Batch& batch);

  /// Each epoch, after the runner put the model in training mode: a callback
  /// may put part of it (a frozen backbone's batch norms) in eval mode.
  void on_epoch_begin(std::function<void(Runner&, int64_t epoch)> f) { epoch_begin_.push_back(std::move(f)); }
  void on_step_end(std::function<void(Runner&, const StepInfo&)> f) { step_end_.push_back(std::move(f)); }
  /// After an epoch's training, before its evaluation.
  void on_train_epoch_end(std::function<void(Runner&, int64_t epoch)> f) { train_end_.push_back(std::move(f)); }
  void on_epoch_end(std::function<void(Runner&, const Metrics&)> f) { epoch_end_.push_back(std::move(f)); }

  nn::Module& model() { return model_; }
  optim::Optimizer& optimizer() { return optimizer_; }
  autodiff::GradManager& grad_manager() { return gm_; }
  data::DataLoader& loader(const std::string& name);
  bool has_loader(const std::string& name) const { return loaders_.contains(name); }
  /// Optimizer steps so far; the current epoch (1-based once run() started).
  int64_t global_step() const { return step_; }
  int64_t epoch() const { return epoch_; }
  /// Every finished epoch's metrics; "test_*" of the final test pass in final_metrics().
  const std::vector<Metrics>& history() const { return history_; }
  const Metrics& final_metrics() const { return final_; }
  /// The default classification criterion (cross entropy).
  static Tensor cross_entropy(const Tensor& output, const Tensor& target);

 private:
  struct EpochState;
  class Reporter;
  bool train_epoch(EpochState& st, Reporter& out);
  Tensor optimizer_step();
  void end_step(EpochState& st, Reporter& out, const Tensor& found_inf);
  void read_metrics(Reporter& out);
  void micro_batch(const data::Batch& batch, double share, EpochState& st);
  Metrics evaluate(const std::string& name);
  bool end_epoch(EpochState& st, Reporter& out);
  bool early_stop(const Metrics& m);
  void maybe_checkpoint(bool epoch_end);
  void prune_checkpoints();
  void prepare();

  nn::Module& model_;
  optim::Optimizer& optimizer_;
  Criterion criterion_;
  autodiff::GradManager gm_;
  std::map<std::string, data::DataLoader> loaders_;
  TrainConfig config_;
  std::vector<std::function<void(Runner&, int64_t)>> epoch_begin_, train_end_;
  std::vector<std::function<void(Runner&, const StepInfo&)>> step_end_;
  std::vector<std::function<void(Runner&, const Metrics&)>> epoch_end_;

  // The run's state, all of it in checkpoints.
  int64_t step_ = 0;
  int64_t epoch_ = 0;  // the epoch in progress or last finished, 1-based
  std::vector<Metrics> history_;
  Metrics final_;
  Metrics partial_;  // the epoch in progress: sums and counts so far (as of the last read_metrics)
  std::unique_ptr<detail::DeviceSums> sums_;  // partial_'s sums on the device
  double best_ = 0.0;
  int64_t bad_epochs_ = 0;
  bool stop_requested_ = false;
  int64_t saved_step_ = -1;  // the step of the last checkpoint written
};

}  // namespace mixgrad::train
