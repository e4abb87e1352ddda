// Benchmark: training steps of the MLP, CNN and ResNet of examples/models.hpp
// in fp32 and bf16 autocast, tiny-op autodiff overhead, the MLP's achieved
// GEMM rate against oneDNN's own, and the CNN's peak memory. Built twice from
// this file: `bench_train` (mixgrad alone, always) and `bench_vs_libtorch`
// (with MIXGRAD_BENCH_LIBTORCH=1, where a LibTorch is found), which runs every
// measurement on both frameworks in the same process, alternating, with the
// same models, batch sizes, thread count and optimizer, and prints the ratio
// mixgrad / LibTorch (below 1: mixgrad is faster). Not a test.
//
//   build/tests/perf/bench_vs_libtorch [--rounds 7] [--reps 3] [--warmup 3] [--threads 2]
//                                      [--models mlp,cnn,resnet] [--precisions fp32,bf16,fp16]
//                                      [--sections train,overhead,rss]
//                                      [--rss-steps 5] [--side mixgrad|LibTorch] [--device cpu|cuda|cuda:N]
//
// --device cuda (or cuda:N) runs the GPU benchmark of bench_gpu.cpp instead:
// models, data and optimizers of both sides on that device (see
// docs/cuda.md, "GPU benchmark"); without a CUDA device it prints why and
// exits 77. --device cpu (the default) is the CPU benchmark described here.
//
// --side runs one framework alone (to profile it); `--rss-child SIDE MODEL
// fp32|bf16 STEPS THREADS` is the child process of the memory table and also
// a plain "train N steps" mode for perf. Prints Markdown tables (run_all.sh
// and docs/performance.md). Times are the median and the minimum over
// alternating rounds (see bench_harness.hpp); each round runs every
// contender --reps times.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <mixgrad/device.hpp>
#include <mixgrad/error.hpp>

#include "bench_gpu.hpp"
#include "bench_harness.hpp"
#include "bench_sides.hpp"
#include "onednn_gemm.hpp"
#include "cpu_line.hpp"
#include "cpu_peak.hpp"

#ifndef MIXGRAD_BENCH_LIBTORCH
#define MIXGRAD_BENCH_LIBTORCH 0
#endif

extern char** environ;

namespace perf {
namespace {

struct Side {
  const char* name;
  std::unique_ptr<Runner> (*make_trainer)(Model, Precision, int);
  std::unique_ptr<Runner> (*make_tiny_op)(TinyOp);
  void (*set_threads)(int);
  const char* (*version)();
};

std::vector<Side> all_sides() {
  std::vector<Side> s{{"mixgrad", mixgrad_side::make_trainer, mixgrad_side::make_tiny_op, mixgrad_side::set_threads,
                       mixgrad_side::version}};
#if MIXGRAD_BENCH_LIBTORCH
  s.push_back({"LibTorch", libtorch_side::make_trainer, libtorch_side::make_tiny_op, libtorch_side::set_threads,
               libtorch_side::version});
#endif
  return s;
}

struct Config {
  TimingOptions timing;
  int threads = 2;
  std::vector<Model> models{std::begin(kModels), std::end(kModels)};
  std::vector<Precision> precisions{std::begin(kPrecisions), std::end(kPrecisions)};  // fp32 first
  bool train = true, overhead = true, rss = true;
  int rss_steps = 5;
  std::string only_side;  // empty: every side built in
};

[[noreturn]] void usage(const char* argv0, int code = 2) {
  std::fprintf(code == 0 ? stdout : stderr,
               "usage: %s [--rounds N] [--reps N] [--warmup N] [--threads N] [--models mlp,cnn,resnet]\n"
               "          [--precisions fp32,bf16,fp16] [--sections train,overhead,rss] [--rss-steps N]\n"
               "          [--side mixgrad|LibTorch]\n"
               "          [--device cpu|cuda|cuda:N]   (cuda: the GPU benchmark; models also mlp-4096)\n",
               argv0);
  std::exit(code);
}

bool parse_model(const std::string& s, Model& m) {
  for (Model x : kModels) {
    std::string n = name(x);
    for (auto& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (n == s) {
      m = x;
      return true;
    }
  }
  return false;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const size_t end = comma == std::string::npos ? s.size() : comma;
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// "cpu" -> kCpu, "cuda" -> 0, "cuda:N" -> N: mixgrad::parse_device's forms.
bool parse_device(const std::string& s, int& device) {
  try {
    const mixgrad::Device d = mixgrad::parse_device(s);
    device = d.is_cuda() ? d.index() : kCpu;
    return true;
  } catch (const mixgrad::ValueError&) {
    return false;
  }
}

bool parse_precision(const std::string& s, Precision& p) {
  if (s == "fp32") p = Precision::fp32;
  else if (s == "bf16") p = Precision::bf16;
  else if (s == "fp16") p = Precision::fp16;
  else return false;
  return true;
}

const char* short_name(Precision p) {
  return p == Precision::bf16 ? "bf16" : p == Precision::fp16 ? "fp16" : "fp32";
}

std::string ratio(double a, double b) { return b > 0 && a > 0 ? fixed(a / b, 2) : "-"; }

void check_finite(const Runner& r, const char* what) {
  if (!std::isfinite(r.value())) std::fprintf(stderr, "warning: %s gave a non-finite loss %g\n", what, r.value());
}

// --- training steps -----------------------------------------------------------------------

// Runs every side's four trainers of one model (and, for the MLP, oneDNN's
// GEMM of the first layer's shape) in one alternation, so each table row and
// each ratio compares numbers taken under the same load.
struct ModelResult {
  Model model;
  std::vector<std::vector<Stat>> ms;  // [side][precision of cfg.precisions]
  std::vector<std::vector<double>> loss;  // [side][precision]: after the last timed step
  std::vector<Stat> gemm_ms;              // MLP only: [precision]; 0 when unavailable
};

ModelResult time_model(Model m, const std::vector<Side>& sides, const Config& cfg) {
  std::vector<std::unique_ptr<Runner>> runners;
  std::vector<std::function<void()>> contenders;
  std::vector<std::string> labels;
  for (const Side& s : sides)
    for (Precision p : cfg.precisions) {
      runners.push_back(s.make_trainer(m, p, kCpu));
      labels.push_back(std::string(s.name) + " " + name(m) + " " + name(p));
    }
  const size_t np = cfg.precisions.size();
  ModelResult result{m, {}, {}, std::vector<Stat>(np)};
  std::vector<int> gemm_index(np, -1);
  if (m == Model::mlp)
    for (size_t p = 0; p < np; ++p)
      if (auto g = make_onednn_gemm(256, 1024, 1024, cfg.precisions[p])) {
        gemm_index[p] = static_cast<int>(runners.size());
        runners.push_back(std::move(g));
        labels.push_back(std::string("oneDNN gemm ") + name(cfg.precisions[p]));
      }
  for (auto& r : runners) contenders.push_back([p = r.get()] { p->run(); });
  const auto ms = alternate(contenders, cfg.timing);
  for (size_t i = 0; i < sides.size() * np; ++i) check_finite(*runners[i], labels[i].c_str());
  for (size_t s = 0; s < sides.size(); ++s) {
    result.ms.emplace_back(ms.begin() + static_cast<std::ptrdiff_t>(np * s),
                           ms.begin() + static_cast<std::ptrdiff_t>(np * (s + 1)));
    std::vector<double> loss;
    for (size_t p = 0; p < np; ++p) loss.push_back(runners[np * s + p]->value());
    result.loss.push_back(loss);
  }
  for (size_t p = 0; p < np; ++p)
    if (gemm_index[p] >= 0) result.gemm_ms[p] = ms[gemm_index[p]];
  return result;
}

std::string median_min(const Stat& s, int digits) { return fixed(s.median, digits) + " (" + fixed(s.min, digits) + ")"; }

void print_training(const std::vector<ModelResult>& results, const std::vector<Side>& sides,
                    const std::vector<Precision>& precisions) {
  std::vector<std::string> header{"model", "batch", "precision"};
  for (const Side& s : sides) header.push_back(std::string(s.name) + " ms/step");
  if (sides.size() > 1) {
    header.push_back("mixgrad / LibTorch");
    header.push_back("same, of the minima");
  }
  Table t(header);
  for (const auto& r : results)
    for (size_t p = 0; p < precisions.size(); ++p) {
      std::vector<std::string> row{name(r.model), std::to_string(batch_size(r.model)), name(precisions[p])};
      for (size_t s = 0; s < sides.size(); ++s) row.push_back(median_min(r.ms[s][p], 1));
      if (sides.size() > 1) {
        row.push_back(ratio(r.ms[0][p].median, r.ms[1][p].median));
        row.push_back(ratio(r.ms[0][p].min, r.ms[1][p].min));
      }
      t.row(row);
    }
  std::printf(
      "\n## Training step (forward, cross-entropy, backward, SGD momentum 0.9, zero grads): "
      "median (minimum) over rounds\n\n");
  t.print();

  std::vector<std::string> h2{"model"};
  for (size_t p = 1; p < precisions.size(); ++p)
    for (const Side& s : sides) h2.push_back(std::string(s.name) + " " + short_name(precisions[p]) + " / fp32");
  Table t2(h2);
  for (const auto& r : results) {
    std::vector<std::string> row{name(r.model)};
    for (size_t p = 1; p < precisions.size(); ++p)
      for (size_t s = 0; s < sides.size(); ++s) row.push_back(ratio(r.ms[s][p].median, r.ms[s][0].median));
    t2.row(row);
  }
  std::printf("\n## autocast step time / fp32 step time, medians (below 1: autocast is faster)\n\n");
  t2.print();

  // Sanity: every contender trains (each on its own fixed random batch, the
  // same number of steps), so the losses fall below ln(10) = 2.30 alike.
  // Load: the cores the process kept busy while each contender ran.
  Table t3({"model", "precision", "side", "loss after the last timed step", "cores busy while timed"});
  for (const auto& r : results)
    for (size_t p = 0; p < precisions.size(); ++p)
      for (size_t s = 0; s < sides.size(); ++s)
        t3.row({name(r.model), name(precisions[p]), sides[s].name, fixed(r.loss[s][p], 3), fixed(r.ms[s][p].cores, 2)});
  std::printf(
      "\n## Sanity and load: loss (ln 10 = 2.303 at chance); cores busy = CPU time / wall time of the process "
      "(below the thread count: other work took the cores)\n\n");
  t3.print();
}

void print_roofline(const ModelResult& mlp, const std::vector<Side>& sides, const std::vector<Precision>& precisions,
                    int threads) {
  // The matrix products of a step: 2 flops per multiply-accumulate for the
  // forward, 2 for the weight gradients, 2 for the input gradients of the
  // second and third layers (the first layer's input needs none). The
  // common estimate 6 x MACs x batch counts that one too (14% more here).
  const double batch = static_cast<double>(batch_size(Model::mlp));
  const double rough = 6.0 * static_cast<double>(kMlpMacsPerSample) * batch;
  const double flops = rough - 2.0 * static_cast<double>(kMlpFirstLayerMacsPerSample) * batch;
  const double gemm_flops = 2.0 * 256 * 1024 * 1024;
  // The float32 ceiling: FMA on the widest registers mixgrad and oneDNN use here.
  const int bits = mixgrad::cpu::capabilities().kernels == "avx512" ? 512 : 256;
  const double fma_peak = fma_peak_gflops(threads, bits);
  Table t({"side", "precision", "MLP ms/step", "achieved GFLOP/s", "oneDNN GEMM GFLOP/s", "fraction of GEMM rate",
           "same, of the minima", "fraction of the fp32 FMA peak"});
  for (size_t s = 0; s < sides.size(); ++s)
    for (size_t p = 0; p < precisions.size(); ++p) {
      const Stat& step = mlp.ms[s][p];
      const Stat& gemm = mlp.gemm_ms[p];
      const double achieved = flops / (step.median * 1e6);
      const double ceiling = gemm.median > 0 ? gemm_flops / (gemm.median * 1e6) : 0;
      // Fraction from the fastest rounds: (flops / step.min) / (gemm_flops / gemm.min).
      const double best = gemm.min > 0 ? flops / step.min / (gemm_flops / gemm.min) : 0;
      t.row({sides[s].name, name(precisions[p]), median_min(step, 1), fixed(achieved, 1),
             ceiling > 0 ? fixed(ceiling, 1) : "no oneDNN", ceiling > 0 ? fixed(achieved / ceiling, 2) : "-",
             best > 0 ? fixed(best, 2) : "-",
             fma_peak > 0 && precisions[p] == Precision::fp32 ? fixed(achieved / fma_peak, 2) : "-"});
    }
  std::printf(
      "\n## Roofline: the MLP step's matrix products (%.2f GFLOP: forward, weight and input gradients, no input "
      "gradient for the first layer; 6 x MACs x batch would say %.2f) against oneDNN %s's own 256x1024x1024 "
      "matmul (plain layouts, in the same alternation): medians (minima)\n\n",
      flops * 1e-9, rough * 1e-9, onednn_version());
  t.print();
  std::printf("\n- fp32 FMA peak (%d-bit vfmadd231ps loop, %d threads): %.1f GFLOP/s\n", bits, threads, fma_peak);
}

// --- tiny-op overhead -----------------------------------------------------------------------

void run_overhead(const std::vector<Side>& sides, const Config& cfg) {
  // Many calls per round: one call is a few microseconds.
  const TimingOptions timing{.warmup = 200, .rounds = std::max(cfg.timing.rounds, 3) * 3, .reps = 500};
  std::vector<std::string> header{"op (2x2, fwd+bwd)"};
  for (const Side& s : sides) header.push_back(std::string(s.name) + " us");
  if (sides.size() > 1) header.push_back("mixgrad / LibTorch");
  Table t(header);
  for (TinyOp op : kTinyOps) {
    std::vector<std::unique_ptr<Runner>> runners;
    std::vector<std::function<void()>> contenders;
    for (const Side& s : sides) {
      runners.push_back(s.make_tiny_op(op));
      contenders.push_back([p = runners.back().get()] { p->run(); });
    }
    const auto ms = alternate(contenders, timing);
    std::vector<std::string> row{name(op)};
    for (const Stat& v : ms) row.push_back(median_min({v.median * 1e3, v.min * 1e3}, 2));
    if (sides.size() > 1) row.push_back(ratio(ms[0].median, ms[1].median));
    t.row(row);
  }
  std::printf(
      "\n## Autodiff overhead per op on 2x2 float32 tensors: record, forward, backward with a given upstream "
      "gradient, clear grads: median (minimum) us per op\n\n");
  t.print();
}

// --- peak memory ----------------------------------------------------------------------------

// The child: builds one trainer (or nothing, for the baseline), runs a few
// steps and prints its peak RSS in MiB on stdout for the parent.
int rss_child(const std::string& side, const std::string& model, const std::string& precision, int steps,
              int threads) {
  int rc = 2;
  Model m{};
  if (side == "none") {
    rc = 0;
  } else if (parse_model(model, m)) {
    Precision p = Precision::fp32;
    parse_precision(precision, p);
    for (const Side& s : all_sides())
      if (side == s.name) {
        s.set_threads(threads);
        auto r = s.make_trainer(m, p, kCpu);
        for (int i = 0; i < steps; ++i) r->run();
        rc = std::isfinite(r->value()) ? 0 : 1;
      }
  }
  std::printf("%.3f\n", peak_rss_mib());
  return rc;
}

// Peak RSS of a child process running this binary with `args`, in MiB; -1 on failure.
double child_peak_rss(const std::vector<std::string>& args) {
  std::vector<std::string> copy = args;
  std::string self = "/proc/self/exe";
  std::vector<char*> argv{self.data()};
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  int fd[2];
  if (pipe(fd) != 0) return -1;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fd[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fd[0]);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fd[1]);
  std::string out;
  char buf[256];
  for (ssize_t n; spawned == 0 && (n = read(fd[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  close(fd[0]);
  if (spawned != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
  return out.empty() ? -1 : std::strtod(out.c_str(), nullptr);
}

void run_rss(const std::vector<Side>& sides, const Config& cfg) {
  const std::string steps = std::to_string(cfg.rss_steps), threads = std::to_string(cfg.threads);
  const double base = child_peak_rss({"--rss-child", "none", "cnn", "fp32", steps, threads});
  Table t({"side", "CNN batch 128", "peak RSS MiB", "above an idle process of this binary, MiB"});
  for (const Side& s : sides)
    for (Precision p : cfg.precisions) {
      const double rss = child_peak_rss({"--rss-child", s.name, "cnn", short_name(p), steps, threads});
      t.row({s.name, name(p), rss < 0 ? "failed" : fixed(rss, 1), rss < 0 ? "-" : fixed(rss - base, 1)});
    }
  std::printf(
      "\n## Peak resident memory of CNN training, %d steps, each in its own child process "
      "(an idle child: %.1f MiB)\n\n",
      cfg.rss_steps, base);
  t.print();
}

}  // namespace
}  // namespace perf

// The arguments are parsed by hand, not with Boost.Program_options as the
// examples do: `scripts/gpu-check.sh --bench` compiles this file on the GPU
// machine, which has no Boost headers (docs/cuda.md).
int main(int argc, char** argv) {
  using namespace perf;
  if (argc == 7 && std::strcmp(argv[1], "--rss-child") == 0)
    return rss_child(argv[2], argv[3], argv[4], std::atoi(argv[5]), std::atoi(argv[6]));
  keep_freed_memory();  // the timed sections only: the RSS child keeps glibc's defaults

  Config cfg;
  int device = kCpu;
  bool sections_given = false, models_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") usage(argv[0], 0);
    if (i + 1 >= argc) usage(argv[0]);
    const std::string v = argv[++i];
    if (a == "--rounds") cfg.timing.rounds = std::max(1, std::atoi(v.c_str()));
    else if (a == "--reps") cfg.timing.reps = std::max(1, std::atoi(v.c_str()));
    else if (a == "--warmup") cfg.timing.warmup = std::max(0, std::atoi(v.c_str()));
    else if (a == "--threads") cfg.threads = std::max(1, std::atoi(v.c_str()));
    else if (a == "--rss-steps") cfg.rss_steps = std::max(1, std::atoi(v.c_str()));
    else if (a == "--side") cfg.only_side = v;  // one framework alone, for profiling
    else if (a == "--device") {
      if (!parse_device(v, device)) usage(argv[0]);
    } else if (a == "--models") {
      models_given = true;
      cfg.models.clear();
      for (const auto& s : split(v)) {
        Model m{};
        if (s == "mlp-4096") m = Model::mlp_large;  // the GPU benchmark's large MLP
        else if (!parse_model(s, m)) usage(argv[0]);
        cfg.models.push_back(m);
      }
    } else if (a == "--precisions") {
      cfg.precisions = {Precision::fp32};  // the reference of the ratios, always first
      for (const auto& s : split(v)) {
        Precision p{};
        if (!parse_precision(s, p)) usage(argv[0]);
        if (p != Precision::fp32) cfg.precisions.push_back(p);
      }
    } else if (a == "--sections") {
      sections_given = true;
      cfg.train = cfg.overhead = cfg.rss = false;
      for (const auto& s : split(v)) {
        if (s == "train") cfg.train = true;
        else if (s == "overhead") cfg.overhead = true;
        else if (s == "rss") cfg.rss = true;
        else usage(argv[0]);
      }
    } else usage(argv[0]);
  }

  if (device != kCpu) {
    GpuConfig g{.device = device, .timing = cfg.timing, .models = {}, .only_side = cfg.only_side};
    if (models_given) g.models = cfg.models;
    if (sections_given && !cfg.train) {
      std::fprintf(stderr, "%s: on CUDA only the train section runs\n", argv[0]);
      return 2;
    }
    return run_gpu_benchmark(g);
  }
  for (Model m : cfg.models)
    if (m == Model::mlp_large) usage(argv[0]);  // a GPU model

  auto sides = all_sides();
  if (!cfg.only_side.empty()) {
    std::erase_if(sides, [&](const Side& s) { return cfg.only_side != s.name; });
    if (sides.empty()) usage(argv[0]);
  }
  for (const Side& s : sides) s.set_threads(cfg.threads);
  std::printf("# mixgrad training benchmark\n\n");
  std::printf("- CPU: %s; %u logical cores; threads per framework: %d\n",
              cpu_description().c_str(), std::thread::hardware_concurrency(), cfg.threads);
  for (const Side& s : sides) std::printf("- %s %s\n", s.name, s.version());
  std::printf("- oneDNN linked by mixgrad: %s\n", onednn_version());
  std::printf("- timing: %d warm-up calls, then the median over %d alternating rounds of %d calls each\n",
              cfg.timing.warmup, cfg.timing.rounds, cfg.timing.reps);
  std::printf("- load average at start: %s\n", load_average().c_str());
  std::fflush(stdout);

  if (cfg.train) {
    std::vector<ModelResult> results;
    for (Model m : cfg.models) results.push_back(time_model(m, sides, cfg));
    print_training(results, sides, cfg.precisions);
    for (const auto& r : results)
      if (r.model == Model::mlp) print_roofline(r, sides, cfg.precisions, cfg.threads);
  }
  if (cfg.overhead) run_overhead(sides, cfg);
  if (cfg.rss) run_rss(sides, cfg);
  std::printf("\n- load average at end: %s\n", load_average().c_str());
  return 0;
}
