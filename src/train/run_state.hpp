// The Runner's own part of a checkpoint: its counters and the metrics so far,
// kept in the checkpoint's metadata ("user.runner.*") as text that round-trips
// every double exactly (hexadecimal floating point).
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "mixgrad/io/safetensors.hpp"
#include "mixgrad/train/runner.hpp"

namespace mixgrad::train::detail {

struct RunState {
  std::vector<Metrics> history;  // finished epochs
  Metrics partial;               // sums of the epoch in progress
  double best = 0.0;             // early stopping: the best monitored value
  int64_t bad_epochs = 0;        // epochs since it improved
};

/// Adds `s` to `meta` under "runner.*".
void write_run_state(const RunState& s, io::Metadata& meta);
/// Reads what write_run_state wrote from a checkpoint's user metadata;
/// IOError naming `file` when it is missing or malformed.
RunState read_run_state(const io::Metadata& meta, const std::filesystem::path& file);

}  // namespace mixgrad::train::detail
