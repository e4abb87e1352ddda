// Scaled dot-product attention, forward + backward, mixgrad against LibTorch
// in the same process, at sequence lengths 256, 1024 and 4096 (causal, head
// dim 64), float32 and bfloat16; then mixgrad's peak memory of forward +
// backward at 1k, 4k and 16k tokens. Prints Markdown tables and the command.
//
//   build/tests/perf/bench_attention [--rounds 5] [--reps 1] [--threads 2] [--skip-memory]
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench_attention_sides.hpp"
#include "bench_harness.hpp"
#include "cpu_peak.hpp"
#include "cpu_line.hpp"
#include "mixgrad/mixgrad.hpp"

namespace perf::attention {

namespace {

namespace mg = mixgrad;

class MixgradSdpa final : public Runner {
 public:
  explicit MixgradSdpa(const Config& c) : causal_(c.causal) {
    const auto dt = c.bf16 ? mg::DType::bfloat16 : mg::DType::float32;
    mg::manual_seed(0);
    const mg::Shape s{c.batch, c.heads, c.len, c.dim};
    q_ = mg::normal(s, 0.0, 1.0, dt);
    k_ = mg::normal(s, 0.0, 1.0, dt);
    v_ = mg::normal(s, 0.0, 1.0, dt);
    dy_ = mg::normal(s, 0.0, 1.0, dt);
    gm_.attach({q_, k_, v_});
  }
  void run() override {
    {
      auto rec = gm_.record();
      gm_.backward(mg::F::scaled_dot_product_attention(q_, k_, v_, {.is_causal = causal_}), dy_);
    }
    // One element, as the LibTorch side reads: not a conversion of the whole gradient.
    value_ = mg::F::narrow(mg::F::reshape(q_.grad(), {-1}), 0, 0, 1).item<double>();
    for (auto* t : {&q_, &k_, &v_}) t->set_grad(mg::Tensor());
  }
  double value() const override { return value_; }

 private:
  bool causal_;
  mg::Tensor q_, k_, v_, dy_;
  mg::autodiff::GradManager gm_;
  double value_ = 0;
};

}  // namespace

std::unique_ptr<Runner> make_mixgrad(const Config& c) { return std::make_unique<MixgradSdpa>(c); }

}  // namespace perf::attention

int main(int argc, char** argv) {
  using namespace perf;
  using perf::attention::Config;
  print_cpu_line();
  keep_freed_memory();
  TimingOptions timing{.warmup = 1, .rounds = 5, .reps = 1};
  int threads = 2;
  bool memory = true;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--skip-memory") { memory = false; continue; }
    if (i + 1 >= argc) { std::fprintf(stderr, "bench_attention: %s needs a value\n", argv[i]); return 2; }
    if (k == "--rounds") timing.rounds = std::atoi(argv[++i]);
    else if (k == "--reps") timing.reps = std::atoi(argv[++i]);
    else if (k == "--threads") threads = std::atoi(argv[++i]);
    else { std::fprintf(stderr, "bench_attention: unknown option %s\n", argv[i]); return 2; }
  }
  mixgrad::set_num_threads(threads);
#if MIXGRAD_BENCH_LIBTORCH
  libtorch_side::set_threads(threads);
  std::printf("LibTorch %s, %d threads\n\n", libtorch_side::version(), threads);
#endif
  std::printf("command: bench_attention --rounds %d --reps %d --threads %d\n\n", timing.rounds, timing.reps, threads);

  Table t({"shape [B, H, L, E], causal", "dtype", "mixgrad ms", "mixgrad GFLOP/s", "LibTorch ms", "LibTorch GFLOP/s",
           "mixgrad / LibTorch"});
  const std::vector<Config> shapes = {{.batch = 8, .heads = 8, .len = 256, .dim = 64},
                                      {.batch = 2, .heads = 8, .len = 1024, .dim = 64},
                                      {.batch = 1, .heads = 4, .len = 4096, .dim = 64}};
  for (bool bf16 : {false, true})
    for (Config c : shapes) {
      c.bf16 = bf16;
      std::vector<std::function<void()>> contenders;
      auto mine = attention::make_mixgrad(c);
      contenders.push_back([&] { mine->run(); });
#if MIXGRAD_BENCH_LIBTORCH
      auto theirs = attention::make_libtorch(c);
      contenders.push_back([&] { theirs->run(); });
#endif
      const auto st = alternate(contenders, timing);
      const double gf = attention::flops(c) * 1e-9;
      std::string shape = "[";  // appended: GCC 12 warns (a false -Wrestrict) at "[" + std::to_string
      shape.append(std::to_string(c.batch)).append(", ").append(std::to_string(c.heads)).append(", ");
      shape.append(std::to_string(c.len)).append(", ").append(std::to_string(c.dim)).append("]");
      std::vector<std::string> row = {shape,
                                      bf16 ? "bf16" : "fp32", fixed(st[0].median, 1),
                                      fixed(gf / (st[0].median * 1e-3), 1)};
      if (st.size() > 1) {
        row.push_back(fixed(st[1].median, 1));
        row.push_back(fixed(gf / (st[1].median * 1e-3), 1));
        row.push_back(fixed(st[0].median / st[1].median, 2));
      }
      t.row(row);
    }
  t.print();
  const int bits = mixgrad::cpu::capabilities().kernels == "avx512" ? 512 : 256;
  std::printf("\n- fp32 FMA peak (%d-bit vfmadd231ps loop, %d threads): %.1f GFLOP/s; bf16 dot peak (vdpbf16ps): %.1f GFLOP/s\n",
              bits, threads, fma_peak_gflops(threads, bits), bf16_dot_peak_gflops(threads));

  if (memory) {
    // mixgrad's own allocator: the inputs, the outputs, the gradients and
    // whatever the op allocates, at the peak of one forward + backward.
    std::printf("\nPeak memory of one forward + backward, [1, 1, L, 64] float32, causal (mixgrad's allocator):\n\n");
    Table m({"L", "peak MiB", "of which inputs + outputs + gradients", "peak / previous row"});
    double previous = 0;
    for (int64_t len : {1024, 4096, 16384}) {
      const Config c{.batch = 1, .heads = 1, .len = len, .dim = 64};
      auto r = attention::make_mixgrad(c);
      r->run();  // warm: the caching allocator holds the blocks
      mixgrad::reset_peak_allocated_bytes();
      const double before = static_cast<double>(mixgrad::allocated_bytes());
      r->run();
      const double peak = static_cast<double>(mixgrad::peak_allocated_bytes());
      const double tensors = 8.0 * len * 64 * 4;  // q, k, v, dy, out, and three gradients
      m.row({std::to_string(len), fixed(peak / 1048576.0, 1), fixed(tensors / 1048576.0, 1),
             previous > 0 ? fixed(peak / previous, 2) : "-"});
      previous = peak;
      (void)before;
    }
    m.print();
  }
  return 0;
}
