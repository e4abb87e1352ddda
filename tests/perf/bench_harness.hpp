// tests/perf/bench_harness.hpp — timing and reporting for the benchmarks.
//
//   perf::TimingOptions opt{.warmup = 3, .rounds = 7, .reps = 3};
//   auto ms = perf::alternate({[&] { a->run(); }, [&] { b->run(); }}, opt);
//   // ms[i].median, ms[i].min: over rounds, of the mean ms per call of contender i
//   perf::Table t({"model", "ms/step"});
//   t.row({"MLP", perf::fixed(ms[0].median, 1)});
//   t.print();                                   // a Markdown table
//
// Contenders are timed in alternation — each round runs every contender
// `reps` times, in forward order on even rounds and reverse order on odd
// ones — so a change in the machine's load during the run touches all of them
// alike, and the median over rounds drops rounds that a burst of load hit.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace perf {

struct TimingOptions {
  int warmup = 3;  // untimed calls of each contender first
  int rounds = 7;  // timed rounds; the median over rounds is reported
  int reps = 3;    // calls of each contender per round
};

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Per contender: every round's mean milliseconds per call, in round order.
inline std::vector<std::vector<double>> alternate_samples(const std::vector<std::function<void()>>& contenders,
                                                          const TimingOptions& options) {
  const size_t n = contenders.size();
  for (const auto& f : contenders)
    for (int i = 0; i < options.warmup; ++i) f();
  std::vector<std::vector<double>> samples(n);
  for (int r = 0; r < options.rounds; ++r) {
    for (size_t k = 0; k < n; ++k) {
      const size_t i = r % 2 == 0 ? k : n - 1 - k;
      const double t0 = now_seconds();
      for (int j = 0; j < options.reps; ++j) contenders[i]();
      samples[i].push_back((now_seconds() - t0) * 1e3 / options.reps);
    }
  }
  return samples;
}

/// A contender's milliseconds per call over the rounds: the median, and the
/// minimum (the round least disturbed by other work on the machine).
struct Stat {
  double median = 0;
  double min = 0;
};

/// Stat of each contender, timed in alternation.
inline std::vector<Stat> alternate(const std::vector<std::function<void()>>& contenders, const TimingOptions& options) {
  std::vector<Stat> out;
  for (const auto& s : alternate_samples(contenders, options))
    out.push_back({median(s), s.empty() ? 0.0 : *std::min_element(s.begin(), s.end())});
  return out;
}

/// `v` with `digits` decimals.
inline std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

/// A Markdown table, columns padded to their widest cell.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void row(std::vector<std::string> cells) {
    cells.resize(rows_.front().size());
    rows_.push_back(std::move(cells));
  }
  void print(std::FILE* out = stdout) const {
    std::vector<size_t> width(rows_.front().size(), 3);
    for (const auto& r : rows_)
      for (size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], r[c].size());
    auto line = [&](const std::vector<std::string>& r) {
      std::fputs("|", out);
      for (size_t c = 0; c < r.size(); ++c) std::fprintf(out, " %-*s |", static_cast<int>(width[c]), r[c].c_str());
      std::fputs("\n", out);
    };
    line(rows_.front());
    std::fputs("|", out);
    for (size_t w : width) std::fprintf(out, "%s|", std::string(w + 2, '-').c_str());
    std::fputs("\n", out);
    for (size_t i = 1; i < rows_.size(); ++i) line(rows_[i]);
    std::fflush(out);
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

/// This process's peak resident set size so far, in MiB.
inline double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

/// The first line of /proc/loadavg ("1.23 0.98 0.80 2/345 6789"), or "?".
inline std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string line;
  if (!std::getline(f, line)) return "?";
  return line;
}

}  // namespace perf
