// Benchmark: the MLP's training step (batch 256, 784-1024-1024-10, SGD
// momentum 0.9) under each mixed-precision mode, against oneDNN's own bf16
// GEMM rate and, where a LibTorch is found, LibTorch's bf16 autocast step.
// All contenders run in one alternation (as bench_harness.hpp's alternate),
// so each row is taken under the same load. Besides wall time it reports
// the process's CPU time per step (user + system, all threads): on a shared
// machine, whose other work takes the cores away and stretches wall time
// unevenly, CPU time with one thread is the steadier measure of the work a
// step does. Not a test.
//
//   build/tests/perf/bench_amp [--rounds 9] [--reps 3] [--warmup 3] [--threads 1] [--only NAME]
//
// Modes (apex's names; docs/apex.md):
//   fp32               float32 weights, no autocast
//   bf16 O1            float32 weights, autocast (weights cast per step, grads cast back)
//   bf16 O2            bfloat16 weights + float32 master weights in the optimizer, autocast
//   bf16 O3            bfloat16 weights, no master copy, autocast
//   fp16 O1 / O2 ...   the same with float16 and a GradScaler, its unscale either a
//                      separate pass ("unscale pass") or inside the update ("fused")
// --only NAME runs one contender in a loop for a profiler (perf record).
// After the table: the ceiling, the step's products at the CPU's bf16
// dot-product peak (cpu_peak.hpp) and at oneDNN's GEMM rate, against
// LibTorch's step. The heap keeps what contenders free (keep_freed_memory in
// bench_harness.hpp), so LibTorch is not timed re-faulting its pages.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "bench_sides.hpp"
#include "cpu_peak.hpp"
#include "mixgrad/mixgrad.hpp"
#include "mixgrad/nn.hpp"
#include "mixgrad/optim.hpp"
#include "models.hpp"
#include "onednn_gemm.hpp"
#include "cpu_line.hpp"

#ifndef MIXGRAD_BENCH_LIBTORCH
#define MIXGRAD_BENCH_LIBTORCH 0
#endif

namespace perf {
namespace {

namespace mg = mixgrad;
namespace F = mixgrad::F;

enum class Weights { fp32, low_master, low };  // fp32 (O1), 16-bit + master (O2), 16-bit (O3)

struct Mode {
  std::string name;
  mg::DType low;     // autocast dtype; float32: no autocast
  Weights weights;
  bool scaler;       // a GradScaler (float16)
  bool fused;        // its unscale inside the optimizer's update
};

class AmpTrainer final : public Runner {
 public:
  explicit AmpTrainer(const Mode& m)
      : mode_(m),
        net_((mg::manual_seed(0), models::make_mlp())),
        opt_(prepare(net_, m), {.lr = 0.01, .momentum = 0.9, .master_weights = m.weights == Weights::low_master}) {
    gm_.attach(net_.parameters());
    x_ = mg::normal({256, 784});
    if (m.weights != Weights::fp32) x_ = x_.to(m.low);  // the data arrives in the weights' dtype
    std::mt19937 gen(1);
    std::uniform_int_distribution<int64_t> pick(0, models::kClasses - 1);
    std::vector<int64_t> y(256);
    for (auto& l : y) l = pick(gen);
    y_ = mg::tensor(y, {256});
  }

  void run() override {
    mg::Tensor loss;
    {
      auto recording = gm_.record();
      if (mode_.low != mg::DType::float32) {
        mg::amp::autocast scope(true, mode_.low);
        loss = F::cross_entropy(net_(x_), y_);
      } else {
        loss = F::cross_entropy(net_(x_), y_);
      }
      if (!mode_.scaler) {
        gm_.backward(loss);
      } else if (mode_.fused) {
        scaler_.backward(gm_, loss, mg::Tensor(), {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
      } else {
        scaler_.backward(gm_, loss);  // unscale pass and update
      }
    }
    if (mode_.scaler && mode_.fused) {
      opt_.step(scaler_);
      scaler_.update();
    } else {
      opt_.step();
    }
    opt_.clear_grad();
    value_ = loss.item<double>();
  }
  double value() const override { return value_; }

 private:
  static std::vector<mg::Tensor> prepare(mg::nn::Sequential& net, const Mode& m) {
    if (m.weights != Weights::fp32) net.to(m.low);
    return net.parameters();
  }

  Mode mode_;
  mg::nn::Sequential net_;
  mg::optim::SGD opt_;
  mg::autodiff::GradManager gm_;
  mg::amp::GradScaler scaler_{mg::amp::GradScalerOptions{.init_scale = 1024.0}};
  mg::Tensor x_, y_;
  double value_ = 0;
};

struct Contender {
  std::string name;
  std::unique_ptr<Runner> runner;
  bool is_gemm = false;
  bool is_torch = false;
};

// What no step can beat: the step's matrix products at the CPU's bf16
// dot-product peak (cpu_peak.hpp) and at oneDNN's GEMM rate, in CPU ms per
// step and as a fraction of LibTorch's step (CPU time, as the table).
void print_ceiling(double flops, double gemm_rate, double torch_ms, int threads) {
  const double peak = bf16_dot_peak_gflops(threads) / threads;  // per thread
  if (peak <= 0) return;
  const double at_peak = flops / (peak * 1e6), at_gemm = gemm_rate > 0 ? flops / (gemm_rate * 1e6) : 0;
  auto of_torch = [&](double ms) { return torch_ms > 0 ? ", " + fixed(ms / torch_ms, 2) + " of LibTorch's step" : ""; };
  std::printf("\n## The ceiling: the step's %.2f GFLOP of matrix products at this CPU's bf16 peak\n\n", flops / 1e9);
  std::printf("- bf16 dot-product peak (vdpbf16ps loop, %d thread(s) at once): %.1f GFLOP/s per thread; oneDNN's GEMM "
              "above runs at %.2f of it\n", threads, peak, gemm_rate > 0 ? gemm_rate / peak : 0.0);
  std::printf("- the products alone at that peak: %.2f CPU ms per step%s\n", at_peak, of_torch(at_peak).c_str());
  if (at_gemm > 0)
    std::printf("- the products alone at oneDNN's GEMM rate: %.2f CPU ms per step%s\n", at_gemm, of_torch(at_gemm).c_str());
}

}  // namespace
}  // namespace perf

int main(int argc, char** argv) {
  perf::print_cpu_line();
  using namespace perf;
  keep_freed_memory();
  TimingOptions timing{.warmup = 3, .rounds = 9, .reps = 3};
  int threads = 1;
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--rounds") timing.rounds = std::atoi(argv[i + 1]);
    else if (k == "--reps") timing.reps = std::atoi(argv[i + 1]);
    else if (k == "--warmup") timing.warmup = std::atoi(argv[i + 1]);
    else if (k == "--threads") threads = std::atoi(argv[i + 1]);
    else if (k == "--only") only = argv[i + 1];
    else {
      std::fprintf(stderr, "bench_amp: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  mixgrad::set_num_threads(threads);
#if MIXGRAD_BENCH_LIBTORCH
  libtorch_side::set_threads(threads);
#endif
  using mixgrad::DType;
  const std::vector<Mode> modes = {
      {"fp32", DType::float32, Weights::fp32, false, false},
      {"bf16 O1 (autocast)", DType::bfloat16, Weights::fp32, false, false},
      {"bf16 O2 (bf16 weights, master)", DType::bfloat16, Weights::low_master, false, false},
      {"bf16 O3 (bf16 weights)", DType::bfloat16, Weights::low, false, false},
      {"fp16 O1, unscale pass", DType::float16, Weights::fp32, true, false},
      {"fp16 O1, fused unscale", DType::float16, Weights::fp32, true, true},
      {"fp16 O2, unscale pass", DType::float16, Weights::low_master, true, false},
      {"fp16 O2, fused unscale", DType::float16, Weights::low_master, true, true},
  };
  std::vector<Contender> cs;
  for (const Mode& m : modes) cs.push_back({"mixgrad " + m.name, std::make_unique<AmpTrainer>(m)});
  if (auto g = make_onednn_gemm(256, 1024, 1024, Precision::bf16))
    cs.push_back({"oneDNN bf16 GEMM 256x1024x1024", std::move(g), true});
#if MIXGRAD_BENCH_LIBTORCH
  cs.push_back({"LibTorch bf16 autocast", libtorch_side::make_trainer(Model::mlp, Precision::bf16), false, true});
#endif

  if (!only.empty()) {
    for (auto& c : cs)
      if (c.name.find(only) != std::string::npos) {
        std::printf("running %s 200 times\n", c.name.c_str());
        for (int i = 0; i < 200; ++i) c.runner->run();
        return 0;
      }
    std::fprintf(stderr, "bench_amp: no contender matches %s\n", only.c_str());
    return 2;
  }

  // The alternation of bench_harness.hpp, keeping each round's CPU time too.
  for (auto& c : cs)
    for (int i = 0; i < timing.warmup; ++i) c.runner->run();
  std::vector<std::vector<double>> wall_ms(cs.size()), cpu_ms(cs.size());
  for (int r = 0; r < timing.rounds; ++r)
    for (size_t k = 0; k < cs.size(); ++k) {
      const size_t i = r % 2 == 0 ? k : cs.size() - 1 - k;
      const double c0 = cpu_seconds(), t0 = now_seconds();
      for (int j = 0; j < timing.reps; ++j) cs[i].runner->run();
      wall_ms[i].push_back((now_seconds() - t0) * 1e3 / timing.reps);
      cpu_ms[i].push_back((cpu_seconds() - c0) * 1e3 / timing.reps);
    }
  std::vector<Stat> ms;  // median and min of the CPU time; cores: wall median
  for (size_t i = 0; i < cs.size(); ++i)
    ms.push_back({median(cpu_ms[i]), *std::min_element(cpu_ms[i].begin(), cpu_ms[i].end()), median(wall_ms[i])});

  const double batch = 256;
  const double flops = 6.0 * static_cast<double>(kMlpMacsPerSample) * batch -
                       2.0 * static_cast<double>(kMlpFirstLayerMacsPerSample) * batch;
  const double gemm_flops = 2.0 * 256 * 1024 * 1024;
  const Stat* gemm = nullptr;
  const Stat* torch = nullptr;
  for (size_t i = 0; i < cs.size(); ++i) {
    if (cs[i].is_gemm) gemm = &ms[i];
    if (cs[i].is_torch) torch = &ms[i];
  }
  std::printf("\n## MLP training step by AMP mode (batch 256, SGD momentum 0.9, %d threads): CPU ms per step, median "
              "(min) over %d alternating rounds of %d steps; rates and ratios from the CPU-time medians\n\n",
              threads, timing.rounds, timing.reps);
  Table t({"contender", "CPU ms/step", "wall ms/step", "GFLOP/s", "fraction of oneDNN bf16 GEMM rate",
           "/ LibTorch bf16 autocast", "loss"});
  for (size_t i = 0; i < cs.size(); ++i) {
    const Stat& s = ms[i];
    const bool step = !cs[i].is_gemm;
    const double f = step ? flops : gemm_flops;
    const double rate = f / (s.median * 1e6);
    const double gemm_rate = gemm ? gemm_flops / (gemm->median * 1e6) : 0;
    t.row({cs[i].name, fixed(s.median, 2) + " (" + fixed(s.min, 2) + ")", fixed(s.cores, 2), fixed(rate, 1),
           gemm_rate > 0 ? fixed(rate / gemm_rate, 2) : "-",
           torch && step ? fixed(s.median / torch->median, 2) : "-", step ? fixed(cs[i].runner->value(), 3) : "-"});
  }
  t.print();
  print_ceiling(flops, gemm ? gemm_flops / (gemm->median * 1e6) : 0, torch ? torch->median : 0, threads);
  return 0;
}
