// The GPU benchmark (`bench_vs_libtorch --device cuda[:N]`, see
// bench_gpu.hpp and docs/cuda.md, "GPU benchmark"). Every contender's model,
// data and optimizer live on the one device; each timed call is a step
// followed by a device synchronisation, so a time is the step's work on the
// GPU, not the time to queue it. Contenders alternate as in the CPU
// benchmark (bench_harness.hpp).
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_gpu.hpp"

#ifndef MIXGRAD_BENCH_LIBTORCH
#define MIXGRAD_BENCH_LIBTORCH 0
#endif

namespace perf {
namespace {

struct GpuSide {
  const char* name;
  std::unique_ptr<Runner> (*make_trainer)(Model, Precision, int);
  std::unique_ptr<Runner> (*make_matmul)(int64_t, int64_t, int64_t, Precision, int);
  int (*device_count)(const char**);
  void (*synchronize)(int);
  int64_t (*peak_memory)(int);
  void (*reset_peak_memory)(int);
  const char* (*version)();
};

std::vector<GpuSide> gpu_sides() {
  std::vector<GpuSide> s{{"mixgrad", mixgrad_side::make_trainer, mixgrad_side::make_matmul,
                          mixgrad_side::cuda_device_count, mixgrad_side::synchronize, mixgrad_side::peak_memory,
                          mixgrad_side::reset_peak_memory, mixgrad_side::version}};
#if MIXGRAD_BENCH_LIBTORCH
  s.push_back({"LibTorch", libtorch_side::make_trainer, libtorch_side::make_matmul, libtorch_side::cuda_device_count,
               libtorch_side::synchronize, libtorch_side::peak_memory, libtorch_side::reset_peak_memory,
               libtorch_side::version});
#endif
  return s;
}

constexpr Precision kGpuPrecisions[] = {Precision::fp32, Precision::fp16};
constexpr int kMemorySteps = 3;

std::string ratio(double a, double b) { return b > 0 && a > 0 ? fixed(a / b, 2) : "-"; }
std::string median_min(const Stat& s, int digits) { return fixed(s.median, digits) + " (" + fixed(s.min, digits) + ")"; }
std::string mib(int64_t bytes) { return bytes < 0 ? "n/a" : fixed(static_cast<double>(bytes) / (1024.0 * 1024.0), 1); }

// The matrix products of one MLP-4096 step: forward and weight gradients of
// the three layers, input gradients of the second and third (the input
// needs none).
double large_mlp_flops() {
  const double b = static_cast<double>(batch_size(Model::mlp_large)), w = static_cast<double>(kLargeWidth);
  const double forward = 2 * b * (2 * w * w + w * 10);
  return 2 * forward + 2 * b * (w * w + w * 10);
}
constexpr int64_t kGemmM = 1024, kGemmK = kLargeWidth, kGemmN = kLargeWidth;  // the [1024,4096] x [4096,4096] product

struct ModelResult {
  Model model;
  std::string error;                      // non-empty: the model failed, no times
  std::vector<std::vector<Stat>> ms;      // [side][precision]
  std::vector<std::vector<double>> loss;  // [side][precision]
  std::vector<std::vector<Stat>> gemm;    // MLP-4096 only: [side][precision] bare GEMM
};

ModelResult time_model(Model m, const std::vector<GpuSide>& sides, const GpuConfig& cfg) {
  ModelResult result{m, {}, {}, {}, {}};
  const int dev = cfg.device;
  try {
    std::vector<std::unique_ptr<Runner>> runners;
    std::vector<void (*)(int)> sync;
    for (const GpuSide& s : sides)
      for (Precision p : kGpuPrecisions) {
        runners.push_back(s.make_trainer(m, p, dev));
        sync.push_back(s.synchronize);
      }
    if (m == Model::mlp_large)
      for (const GpuSide& s : sides)
        for (Precision p : kGpuPrecisions) {
          runners.push_back(s.make_matmul(kGemmM, kGemmK, kGemmN, p, dev));
          sync.push_back(s.synchronize);
        }
    std::vector<std::function<void()>> contenders;
    for (size_t i = 0; i < runners.size(); ++i)
      contenders.push_back([r = runners[i].get(), f = sync[i], dev] {
        r->run();
        f(dev);
      });
    const auto ms = alternate(contenders, cfg.timing);
    const size_t np = std::size(kGpuPrecisions);
    for (size_t s = 0; s < sides.size(); ++s) {
      result.ms.emplace_back(ms.begin() + static_cast<long>(s * np), ms.begin() + static_cast<long>((s + 1) * np));
      result.loss.push_back({});
      for (size_t p = 0; p < np; ++p) result.loss.back().push_back(runners[s * np + p]->value());
      if (m == Model::mlp_large) {
        const size_t g = sides.size() * np + s * np;
        result.gemm.emplace_back(ms.begin() + static_cast<long>(g), ms.begin() + static_cast<long>(g + np));
      }
    }
  } catch (const std::exception& e) {
    result.error = e.what();
  }
  return result;
}

// Peak bytes held by tensors over `kMemorySteps` steps of a fresh trainer,
// above what the device held before it was built; -1 where the side cannot
// tell, -2 when the trainer failed.
int64_t peak_step_memory(const GpuSide& s, Model m, Precision p, int dev) {
  try {
    s.synchronize(dev);
    s.reset_peak_memory(dev);
    const int64_t before = s.peak_memory(dev);
    if (before < 0) return -1;
    {
      auto r = s.make_trainer(m, p, dev);
      for (int i = 0; i < kMemorySteps; ++i) r->run();
      s.synchronize(dev);
    }
    return s.peak_memory(dev) - before;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "warning: %s %s %s memory run failed: %s\n", s.name, name(m), name(p), e.what());
    return -2;
  }
}

void print_training(const std::vector<ModelResult>& results, const std::vector<GpuSide>& sides) {
  std::vector<std::string> header{"model", "batch", "precision"};
  for (const GpuSide& s : sides) header.push_back(std::string(s.name) + " ms/step");
  if (sides.size() > 1) {
    header.push_back("mixgrad / LibTorch (target <= 1.0)");
    header.push_back("same, of the minima");
  }
  Table t(header);
  for (const auto& r : results) {
    if (!r.error.empty()) {
      t.row({name(r.model), std::to_string(batch_size(r.model)), "failed: " + r.error});
      continue;
    }
    for (size_t p = 0; p < std::size(kGpuPrecisions); ++p) {
      std::vector<std::string> row{name(r.model), std::to_string(batch_size(r.model)), name(kGpuPrecisions[p])};
      for (size_t s = 0; s < sides.size(); ++s) row.push_back(median_min(r.ms[s][p], 2));
      if (sides.size() > 1) {
        row.push_back(ratio(r.ms[0][p].median, r.ms[1][p].median));
        row.push_back(ratio(r.ms[0][p].min, r.ms[1][p].min));
      }
      t.row(row);
    }
  }
  std::printf(
      "\n## GPU training step (forward, cross-entropy, backward (fp16: loss-scaled, unscaled, overflow-checked), "
      "SGD momentum 0.9, zero grads, then a device synchronisation): median (minimum) ms over rounds\n\n");
  t.print();

  std::vector<std::string> h2{"model"};
  for (const GpuSide& s : sides) h2.push_back(std::string(s.name) + " fp32 / fp16 (speed-up)");
  Table t2(h2);
  for (const auto& r : results) {
    if (!r.error.empty()) continue;
    std::vector<std::string> row{name(r.model)};
    for (size_t s = 0; s < sides.size(); ++s) row.push_back(ratio(r.ms[s][0].median, r.ms[s][1].median));
    t2.row(row);
  }
  std::printf(
      "\n## AMP speed-up: fp32 step time / fp16 autocast step time, medians (target for mixgrad: >= 2 on the "
      "GEMM-bound MLP and MLP-4096)\n\n");
  t2.print();

  Table t3({"model", "precision", "side", "loss after the last timed step"});
  for (const auto& r : results)
    if (r.error.empty())
      for (size_t p = 0; p < std::size(kGpuPrecisions); ++p)
        for (size_t s = 0; s < sides.size(); ++s)
          t3.row({name(r.model), name(kGpuPrecisions[p]), sides[s].name, fixed(r.loss[s][p], 3)});
  std::printf("\n## Sanity: loss after the timed steps (ln 10 = 2.303 at chance; each trains on one fixed batch)\n\n");
  t3.print();
}

void print_memory(const std::vector<Model>& models, const std::vector<GpuSide>& sides, int dev) {
  Table t({"model", "side", "fp32 peak MiB", "fp16 peak MiB", "fp16 / fp32 (target <= 0.7)"});
  for (Model m : models)
    for (const GpuSide& s : sides) {
      const int64_t a = peak_step_memory(s, m, Precision::fp32, dev);
      const int64_t b = peak_step_memory(s, m, Precision::fp16, dev);
      const auto cell = [](int64_t v) { return v == -2 ? std::string("failed") : mib(v); };
      t.row({name(m), s.name, cell(a), cell(b), a > 0 && b > 0 ? fixed(static_cast<double>(b) / static_cast<double>(a), 2) : "-"});
    }
  std::printf(
      "\n## Peak GPU memory held by tensors over %d steps of a fresh trainer (model, optimizer state, "
      "activations, gradients), above what the device held before: each library's caching-allocator counter "
      "(n/a: this LibTorch has no device-generic memory statistics)\n\n",
      kMemorySteps);
  t.print();
}

void print_roofline(const ModelResult& r, const std::vector<GpuSide>& sides) {
  if (!r.error.empty() || r.gemm.empty()) return;
  const double flops = large_mlp_flops();
  const double gemm_flops = 2.0 * kGemmM * kGemmK * kGemmN;
  // The reference rate: LibTorch's torch::mm (cuBLAS) where LibTorch runs, else mixgrad's own matmul (cuBLASLt).
  const size_t ref = sides.size() > 1 ? 1 : 0;
  Table t({"side", "precision", "MLP-4096 ms/step", "achieved TFLOP/s", std::string(sides[ref].name) + " GEMM TFLOP/s",
           "fraction of GEMM rate (target >= 0.8)", "mixgrad GEMM / reference GEMM"});
  for (size_t s = 0; s < sides.size(); ++s)
    for (size_t p = 0; p < std::size(kGpuPrecisions); ++p) {
      const double step = r.ms[s][p].median, gemm = r.gemm[ref][p].median;
      const double achieved = step > 0 ? flops / (step * 1e9) : 0, ceiling = gemm > 0 ? gemm_flops / (gemm * 1e9) : 0;
      t.row({sides[s].name, name(kGpuPrecisions[p]), median_min(r.ms[s][p], 2), fixed(achieved, 1), fixed(ceiling, 1),
             ceiling > 0 ? fixed(achieved / ceiling, 2) : "-",
             s == 0 ? ratio(r.gemm[ref][p].median, r.gemm[0][p].median) : ""});
    }
  std::printf(
      "\n## Roofline: the MLP-4096 step's matrix products (%.1f GFLOP) against the bare [%lld,%lld] x [%lld,%lld] "
      "product on the same device, in the same alternation (fp32: no TF32 in either library; fp16: float32 "
      "accumulation); the last column is the bare-GEMM rate of mixgrad's matmul over the reference's\n\n",
      flops * 1e-9, static_cast<long long>(kGemmM), static_cast<long long>(kGemmK), static_cast<long long>(kGemmK),
      static_cast<long long>(kGemmN));
  t.print();
}

}  // namespace

int run_gpu_benchmark(const GpuConfig& cfg) {
  auto sides = gpu_sides();
  const char* why = "?";
  const int count = sides.front().device_count(&why);
  if (count == 0) {
    std::printf("GPU benchmark skipped: %s\n", why);
    return 77;
  }
  if (cfg.device >= count) {
    std::fprintf(stderr, "no CUDA device %d: mixgrad sees %d\n", cfg.device, count);
    return 2;
  }
  std::vector<std::string> notes;
  for (size_t i = 1; i < sides.size();) {
    const char* reason = "?";
    if (sides[i].device_count(&reason) > cfg.device) {
      ++i;
    } else {
      notes.push_back(std::string(sides[i].name) + " left out: " + reason);
      sides.erase(sides.begin() + static_cast<long>(i));
    }
  }
  if (!cfg.only_side.empty()) {
    std::erase_if(sides, [&](const GpuSide& s) { return cfg.only_side != s.name; });
    if (sides.empty()) {
      std::fprintf(stderr, "no side %s with CUDA in this build\n", cfg.only_side.c_str());
      return 2;
    }
  }
  std::vector<Model> models = cfg.models;
  if (models.empty()) models = {Model::mlp, Model::cnn, Model::resnet, Model::mlp_large};

  std::printf("# mixgrad GPU training benchmark\n\n");
  std::printf("- device: cuda:%d (of %d)\n", cfg.device, count);
  for (const GpuSide& s : sides) std::printf("- %s %s\n", s.name, s.version());
  for (const auto& n : notes) std::printf("- %s\n", n.c_str());
  std::printf("- timing: %d warm-up calls, then the median over %d alternating rounds of %d calls each; every call "
              "ends with a device synchronisation\n",
              cfg.timing.warmup, cfg.timing.rounds, cfg.timing.reps);
  std::fflush(stdout);

  std::vector<ModelResult> results;
  for (Model m : models) results.push_back(time_model(m, sides, cfg));
  print_training(results, sides);
  for (const auto& r : results)
    if (r.model == Model::mlp_large) print_roofline(r, sides);
  print_memory(models, sides, cfg.device);
  bool failed = false;
  for (const auto& r : results) failed = failed || !r.error.empty();
  return failed ? 1 : 0;
}

}  // namespace perf
