// metrics.hpp — the CSV files written with --metrics FILE.csv.
//
//   MetricsWriter metrics("run.csv");          // also opens run.epochs.csv
//   metrics.step({.step = 1, .epoch = 1, .loss = 2.3, .scale_factor = 16, .lr = 0.05, .skipped = false});
//   metrics.epoch({.epoch = 1, .train_loss = 0.45, .test_accuracy = 0.88, .seconds = 21, .img_per_s = 2900});
//
// FILE.csv has one row per optimizer step:
//   step,epoch,loss,scale_factor,lr,skipped
// FILE.epochs.csv one row per epoch:
//   epoch,train_loss,test_accuracy,seconds,img_per_s,eval_seconds,skipped_steps
// `loss` is the step's mean training loss (over its micro-batches with
// --accumulate), `scale_factor` the loss scale the step's backward used (1
// without a GradScaler), `skipped` 1 when the GradScaler found inf / NaN and
// the step was skipped. test_accuracy is a fraction in [0, 1], `seconds` the
// epoch's training time (the test pass is `eval_seconds`). An unopenable
// file throws mg::IOError before training starts.
#pragma once

#include <cstdint>
#include <fstream>
#include <mixgrad/error.hpp>
#include <string>

namespace train {

struct StepMetrics {
  int64_t step = 0;  // 1-based optimizer step over the whole run
  int epoch = 0;
  double loss = 0.0;
  double scale_factor = 1.0;
  double lr = 0.0;
  bool skipped = false;
};

struct EpochMetrics {
  int epoch = 0;
  double train_loss = 0.0;
  double test_accuracy = 0.0;
  double seconds = 0.0;
  double img_per_s = 0.0;
  double eval_seconds = 0.0;
  int64_t skipped_steps = 0;  // in this epoch
};

/// "run.csv" -> "run.epochs.csv"; a path without ".csv" gets ".epochs.csv" appended.
inline std::string epochs_path(const std::string& steps_path) {
  const std::string ext = ".csv";
  const bool has_ext = steps_path.size() >= ext.size() && steps_path.ends_with(ext);
  return (has_ext ? steps_path.substr(0, steps_path.size() - ext.size()) : steps_path) + ".epochs.csv";
}

class MetricsWriter {
 public:
  /// No files: every call does nothing.
  MetricsWriter() = default;
  /// Creates (truncates) `steps_path` and its epochs_path() and writes the headers.
  explicit MetricsWriter(const std::string& steps_path)
      : steps_(open(steps_path)), epochs_(open(epochs_path(steps_path))) {
    steps_ << "step,epoch,loss,scale_factor,lr,skipped\n";
    epochs_ << "epoch,train_loss,test_accuracy,seconds,img_per_s,eval_seconds,skipped_steps\n";
  }

  void step(const StepMetrics& m) {
    if (!steps_.is_open()) return;
    steps_ << m.step << ',' << m.epoch << ',' << m.loss << ',' << m.scale_factor << ',' << m.lr << ','
           << (m.skipped ? 1 : 0) << '\n';
  }

  /// Writes the epoch's row and flushes both files, so an interrupted run
  /// keeps every finished epoch.
  void epoch(const EpochMetrics& m) {
    if (!epochs_.is_open()) return;
    epochs_ << m.epoch << ',' << m.train_loss << ',' << m.test_accuracy << ',' << m.seconds << ',' << m.img_per_s
            << ',' << m.eval_seconds << ',' << m.skipped_steps << '\n';
    epochs_.flush();
    steps_.flush();
  }

 private:
  static std::ofstream open(const std::string& path) {
    std::ofstream f(path);
    if (!f) throw mixgrad::IOError("cannot write the metrics file " + path);
    f.precision(8);
    return f;
  }

  std::ofstream steps_;
  std::ofstream epochs_;
};

}  // namespace train
