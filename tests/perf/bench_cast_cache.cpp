// bench_cast_cache: what autocast's weight-cast cache saves on a recurrent
// network. One training step of an nn::LSTM (one layer; hidden 512, input
// 512, 100 time steps, batch 64 by default) under bfloat16 autocast, with
// the cache on and off (amp::set_autocast_cache_enabled), alternating in one
// process so that a loaded machine slows both sides alike. Per side:
//   casts      F::astype calls per step (autocast's casts and their
//              backward; amp::detail::CastTally counts them)
//   cast ms    the time those casts took, per step
//   forward ms the forward alone (part of the step)
//   step ms    forward + backward + SGD step
//   step CPU   the process's CPU time over the step (all threads)
//   peak MiB   peak tensor memory during the step above the memory before it
// Each figure is the median over the pairs; the ratios are off / on. The
// LSTM projects the whole input sequence with one product, so weight_ih is
// cast once per step either way; weight_hh and bias_hh are cast at every
// time step without the cache. A benchmark, not a test: it prints a table.
//
//   meson configure build -Dbenchmarks=true && ninja -C build tests/perf/bench_cast_cache
//   build/tests/perf/bench_cast_cache [--hidden 512] [--steps 100] [--batch 64] [--pairs 5]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "cpu_line.hpp"

namespace mg = mixgrad;

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int64_t hidden = 512, input = 512, steps = 100, batch = 64;
  int pairs = 5;
};

struct Sample {
  double casts = 0, cast_ms = 0, step_ms = 0, forward_ms = 0, cpu_ms = 0, peak_mib = 0, cache_misses = 0;
};

// CPU time of the whole process (every thread), in ms: less sensitive than
// the wall clock to other processes sharing the cores.
double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const long long v = std::atoll(argv[i + 1]);
    if (flag == "--hidden") o.hidden = v;
    else if (flag == "--input") o.input = v;
    else if (flag == "--steps") o.steps = v;
    else if (flag == "--batch") o.batch = v;
    else if (flag == "--pairs") o.pairs = static_cast<int>(v);
    else {
      std::fprintf(stderr, "unknown option %s (--hidden --input --steps --batch --pairs)\n", flag.c_str());
      std::exit(2);
    }
  }
  if (o.hidden < 1 || o.input < 1 || o.steps < 1 || o.batch < 1 || o.pairs < 1) {
    std::fprintf(stderr, "every option must be >= 1\n");
    std::exit(2);
  }
  return o;
}

struct Bench {
  mg::nn::LSTM lstm;
  mg::Tensor x, target;
  mg::autodiff::GradManager gm;
  mg::optim::SGD opt;

  explicit Bench(const Options& o)
      : lstm(o.input, o.hidden),
        x(mg::uniform({o.steps, o.batch, o.input}, -1.0, 1.0)),
        target(mg::uniform({o.steps, o.batch, o.hidden}, -0.5, 0.5)),
        opt(lstm.parameters(), {.lr = 1e-3}) {
    gm.attach(lstm.parameters());
  }

  // One training step with the cache on or off.
  Sample step(bool cache) {
    Sample s;
    const bool was = mg::amp::is_autocast_cache_enabled();
    mg::amp::set_autocast_cache_enabled(cache);
    const auto stats0 = mg::amp::detail::weight_cache_stats();
    const int64_t base = mg::allocated_bytes();
    mg::reset_peak_allocated_bytes();
    const double cpu0 = process_cpu_ms();
    const auto t0 = Clock::now();
    {
      const mg::amp::detail::CastTally tally;
      {
        auto rec = gm.record();
        mg::Tensor loss;
        {
          mg::amp::autocast scope(true, mg::DType::bfloat16);
          loss = mg::F::mse_loss(lstm(x), target);
        }
        s.forward_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        gm.backward(loss);
      }
      s.casts = static_cast<double>(tally.counts().casts);
      s.cast_ms = tally.counts().seconds * 1e3;
    }
    opt.step().clear_grad();
    s.step_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    s.cpu_ms = process_cpu_ms() - cpu0;
    s.peak_mib = static_cast<double>(mg::peak_allocated_bytes() - base) / (1024.0 * 1024.0);
    s.cache_misses = static_cast<double>(mg::amp::detail::weight_cache_stats().misses - stats0.misses);
    mg::amp::set_autocast_cache_enabled(was);
    return s;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

template <class Get>
double median_of(const std::vector<Sample>& samples, Get get) {
  std::vector<double> v;
  for (const Sample& s : samples) v.push_back(get(s));
  return median(std::move(v));
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  perf::print_cpu_line();
  std::printf("- LSTM: 1 layer, input %lld, hidden %lld, %lld steps, batch %lld; bf16 autocast; "
              "forward + backward + SGD; %d alternating pairs (medians)\n",
              static_cast<long long>(o.input), static_cast<long long>(o.hidden), static_cast<long long>(o.steps),
              static_cast<long long>(o.batch), o.pairs);
  if (!mg::cpu::has_fast_math(mg::DType::bfloat16))
    std::printf("- note: this CPU has no fast bf16 math; products read float32 weights uncast, so few casts "
                "happen either way (docs/amp.md, \"On your CPU: time or memory?\")\n");
  mg::manual_seed(0);
  Bench bench(o);
  (void)bench.step(true);  // warm the allocator's cache and the kernels on both sides
  (void)bench.step(false);
  std::vector<Sample> on, off;
  for (int p = 0; p < o.pairs; ++p) {
    // Alternate which side goes first, so neither always follows the other.
    if (p % 2 == 0) {
      on.push_back(bench.step(true));
      off.push_back(bench.step(false));
    } else {
      off.push_back(bench.step(false));
      on.push_back(bench.step(true));
    }
  }
  std::printf("\n| cache | casts / step | cache misses | cast ms / step | forward ms | step ms | step CPU ms | peak MiB |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& [name, side] : {std::pair{"off", &off}, std::pair{"on", &on}}) {
    std::printf("| %s | %.0f | %.0f | %.1f | %.0f | %.0f | %.0f | %.1f |\n", name,
                median_of(*side, [](const Sample& s) { return s.casts; }),
                median_of(*side, [](const Sample& s) { return s.cache_misses; }),
                median_of(*side, [](const Sample& s) { return s.cast_ms; }),
                median_of(*side, [](const Sample& s) { return s.forward_ms; }),
                median_of(*side, [](const Sample& s) { return s.step_ms; }),
                median_of(*side, [](const Sample& s) { return s.cpu_ms; }),
                median_of(*side, [](const Sample& s) { return s.peak_mib; }));
  }
  // Ratios per pair (off / on), then their median: each pair ran back to back.
  std::vector<double> casts, cast_time, step, cpu, peak;
  for (size_t i = 0; i < on.size(); ++i) {
    casts.push_back(off[i].casts / std::max(on[i].casts, 1.0));
    cast_time.push_back(off[i].cast_ms / std::max(on[i].cast_ms, 1e-9));
    step.push_back(off[i].step_ms / on[i].step_ms);
    cpu.push_back(off[i].cpu_ms / on[i].cpu_ms);
    peak.push_back(off[i].peak_mib / std::max(on[i].peak_mib, 1e-9));
  }
  std::printf("\nper pair, off / on: step ms");
  for (size_t i = 0; i < on.size(); ++i) std::printf(" %.0f/%.0f", off[i].step_ms, on[i].step_ms);
  std::printf("; cast ms");
  for (size_t i = 0; i < on.size(); ++i) std::printf(" %.0f/%.0f", off[i].cast_ms, on[i].cast_ms);
  std::printf("\n");
  std::printf("\noff / on (median of the per-pair ratios): casts %.1fx, cast time %.1fx, step time %.2fx, "
              "step CPU time %.2fx, peak memory %.2fx\n",
              median(casts), median(cast_time), median(step), median(cpu), median(peak));
  return 0;
}
