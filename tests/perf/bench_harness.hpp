// tests/perf/bench_harness.hpp — timing and reporting for the benchmarks.
//
//   perf::TimingOptions opt{.warmup = 3, .rounds = 7, .reps = 3};
//   auto ms = perf::alternate({[&] { a->run(); }, [&] { b->run(); }}, opt);
//   // ms[i].median, ms[i].min: over rounds, of the mean ms per call of contender i;
//   // ms[i].cores: CPU time / wall time while contender i ran
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

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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

/// Keeps the memory a contender frees in glibc's heap for the rest of the
/// process, as a long training run's steady state has it. Call first in
/// main. LibTorch's CPU allocator hands every tensor back to malloc at once;
/// with glibc's defaults the freed top of the heap is returned to the system
/// (brk) and faulted in again, zeroed, by the next step. How often that
/// happens depends on what else the process holds: in bench_amp it cost
/// LibTorch's bf16 MLP step a third of its time (20.5 against 14.8 ms, 19% of
/// its samples in page faults and brk), which flattered every ratio against
/// it. mixgrad's tensors come from its own cache, which keeps freed blocks.
inline void keep_freed_memory() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest: blocks up to 32 MiB from the heap
  mallopt(M_TRIM_THRESHOLD, 1 << 30);   // never give the heap's top back
#endif
}

/// CPU time (user + system) of every thread of this process so far, in seconds.
inline double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

inline double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// A contender's milliseconds per call over the rounds: the median, and the
/// minimum (the round least disturbed by other work on the machine); and
/// how many cores the process kept busy while it ran (CPU time / wall time:
/// below the thread count when other work on the machine took the cores;
/// threads spinning at a barrier count as busy).
struct Stat {
  double median = 0;
  double min = 0;
  double cores = 0;
};

/// Stat of each contender, timed in alternation.
inline std::vector<Stat> alternate(const std::vector<std::function<void()>>& contenders, const TimingOptions& options) {
  const size_t n = contenders.size();
  for (const auto& f : contenders)
    for (int i = 0; i < options.warmup; ++i) f();
  std::vector<std::vector<double>> samples(n);
  std::vector<double> wall(n, 0.0), cpu(n, 0.0);
  for (int r = 0; r < options.rounds; ++r) {
    for (size_t k = 0; k < n; ++k) {
      const size_t i = r % 2 == 0 ? k : n - 1 - k;
      const double c0 = cpu_seconds(), t0 = now_seconds();
      for (int j = 0; j < options.reps; ++j) contenders[i]();
      const double t = now_seconds() - t0;
      cpu[i] += cpu_seconds() - c0;
      wall[i] += t;
      samples[i].push_back(t * 1e3 / options.reps);
    }
  }
  std::vector<Stat> out;
  for (size_t i = 0; i < n; ++i)
    out.push_back({median(samples[i]), samples[i].empty() ? 0.0 : *std::min_element(samples[i].begin(), samples[i].end()),
                   wall[i] > 0 ? cpu[i] / wall[i] : 0.0});
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

/// This process's peak resident set size so far, in MiB: VmHWM of
/// /proc/self/status, or -1 where there is none. (Not getrusage's ru_maxrss:
/// Linux carries into it the memory of the process image that exec replaced,
/// which for a child started by posix_spawn is the parent's.)
inline double peak_rss_mib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;  // in kB
  return -1;
}

/// The first line of /proc/loadavg ("1.23 0.98 0.80 2/345 6789"), or "?".
inline std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string line;
  if (!std::getline(f, line)) return "?";
  return line;
}

}  // namespace perf
