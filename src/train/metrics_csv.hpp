// The Runner's metrics files (TrainConfig::metrics_csv): one row per
// optimizer step in FILE.csv, one per epoch in FILE.epochs.csv, the columns
// scripts/plot_metrics.py plots.
//
//   FILE.csv:        step,epoch,loss,scale_factor,lr,skipped
//   FILE.epochs.csv: epoch, then the epoch's metrics by name (train_loss,
//                    test_accuracy, seconds, img_per_s, ...)
//
// A resumed run keeps the step rows up to its checkpoint's step (a killed
// run may have written some past it) and rewrites the epoch rows from the
// checkpoint's history, so the files read as those of a run never stopped.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "mixgrad/train/runner.hpp"

namespace mixgrad::train::detail {

/// "run.csv" -> "run.epochs.csv"; a path without ".csv" gets ".epochs.csv".
std::filesystem::path epochs_path(const std::filesystem::path& steps_path);

class MetricsCsv {
 public:
  /// No files: every call does nothing.
  MetricsCsv() = default;
  /// Opens both files (IOError when it cannot). `steps_so_far` > 0 keeps
  /// the step rows up to it; `history` is written as the first epoch rows.
  MetricsCsv(const std::filesystem::path& steps_path, int64_t steps_so_far, const std::vector<Metrics>& history);

  void step(const StepInfo& s);
  /// Writes the epoch's row and flushes both files.
  void epoch(const Metrics& m);

 private:
  std::ofstream steps_;
  std::ofstream epochs_;
  std::vector<std::string> columns_;  // fixed by the first epoch row
};

}  // namespace mixgrad::train::detail
