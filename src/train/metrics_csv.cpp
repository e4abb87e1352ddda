#include "train/metrics_csv.hpp"

#include <charconv>
#include <sstream>

#include "mixgrad/error.hpp"

namespace mixgrad::train::detail {

namespace {

constexpr const char* kStepHeader = "step,epoch,loss,scale_factor,lr,skipped";

// The rows of `path` whose first field is a step <= last (the header too).
std::string rows_up_to(const std::filesystem::path& path, int64_t last) {
  std::ifstream in(path);
  std::string line, kept;
  bool header = true;
  while (std::getline(in, line)) {
    int64_t step = 0;
    const auto [ptr, ec] = std::from_chars(line.data(), line.data() + line.size(), step);
    if (!header && (ec != std::errc() || *ptr != ',' || step > last)) continue;
    header = false;
    kept += line + '\n';
  }
  return kept;
}

std::ofstream open_csv(const std::filesystem::path& path) {
  std::ofstream f(path, std::ios::trunc);
  if (!f) throw IOError("Runner: cannot write the metrics file '" + path.string() + "'");
  f.precision(8);
  return f;
}

}  // namespace

std::filesystem::path epochs_path(const std::filesystem::path& steps_path) {
  std::string s = steps_path.string();
  if (s.ends_with(".csv")) s.resize(s.size() - 4);
  return s + ".epochs.csv";
}

MetricsCsv::MetricsCsv(const std::filesystem::path& steps_path, int64_t steps_so_far,
                       const std::vector<Metrics>& history) {
  const std::string kept = steps_so_far > 0 ? rows_up_to(steps_path, steps_so_far) : std::string();
  steps_ = open_csv(steps_path);
  epochs_ = open_csv(epochs_path(steps_path));
  if (kept.empty())
    steps_ << kStepHeader << '\n';
  else
    steps_ << kept;
  for (const Metrics& m : history) epoch(m);
}

void MetricsCsv::step(const StepInfo& s) {
  if (!steps_.is_open()) return;
  steps_ << s.step << ',' << s.epoch << ',' << s.loss() << ',' << s.scale() << ',' << s.lr() << ','
         << (s.skipped() ? 1 : 0) << '\n';
}

void MetricsCsv::epoch(const Metrics& m) {
  if (!epochs_.is_open()) return;
  if (columns_.empty()) {
    columns_.push_back("epoch");
    for (const auto& [name, v] : m)
      if (name != "epoch") columns_.push_back(name);
    for (size_t i = 0; i < columns_.size(); ++i) epochs_ << (i ? "," : "") << columns_[i];
    epochs_ << '\n';
  }
  for (size_t i = 0; i < columns_.size(); ++i) {
    if (i) epochs_ << ',';
    if (auto it = m.find(columns_[i]); it != m.end()) epochs_ << it->second;
  }
  epochs_ << '\n';
  epochs_.flush();
  steps_.flush();
}

}  // namespace mixgrad::train::detail
