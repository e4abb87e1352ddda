// bench_memory: what activation checkpointing buys and costs. A stack of
// pre-norm GPT layers (causal attention, GELU, width, layers, context and
// batch from the flags) trains one step at a time with:
//   none       every activation kept;
//   full       each layer checkpointed (autodiff::checkpoint);
//   attention  each layer checkpointed keeping fused attention's results
//              (CheckpointOptions::keep = {"scaled_dot_product_attention"}):
//              the op whose cost grows with the context's square;
//   products   each layer checkpointed keeping the products' and attention's
//              results (keep = kept_products());
//   alternate  as products, keeping every other linear's result (keep_if,
//              torchtitan's policy): the layer's wide in-projections are
//              kept, its narrow out-projections recomputed;
//   attn+fc1   keeping attention's results and the first feed-forward
//              linear's (keep_if: the layer's third linear call);
//   in+attn+fc2  keeping the in-projection's, attention's and the second
//              feed-forward linear's results (linear calls 0 and 3): the
//              narrow fc2 result spares a wide product, attention's spares
//              the context-squared one, and the in-projection's is what
//              attention's backward needs;
//   attn+fc1+fc2  keeping attention's and both feed-forward linears'
//              (linear calls 2 and 3);
//   dtr:F      each layer a dtr::segment, DTR on with its eviction threshold
//              at F times none's activation peak above the step's base
//              (parameters, gradients, input): 0.75, 0.50 and 0.33.
// Each mode runs in a child process of its own (this program, `--child`), so
// one mode's cached memory cannot lower another's peak. The child reports
// the activation peak (mg::peak_allocated_bytes() during a step above what
// the parameters, their gradients and the input hold), the growth of the
// process's resident set during a step (the allocator's cache emptied
// before it: the measure bench_memory_torch.py can take of PyTorch), the
// median step time (wall clock and the process's CPU time) and a hash of the
// gradients' bits; the parent prints the ratios against `none` and whether
// the gradients are bit-identical.
//
// `--max-batch` also searches, for each mode, the largest batch (doubling,
// then bisecting) whose peak stays under `none`'s peak at the given batch.
// `--torch` runs tests/perf/bench_memory_torch.py on the same model (PyTorch
// from pip, torch.utils.checkpoint), which prints its own table.
//
//   build/tests/perf/bench_memory --width 256 --layers 8 --context 1024 --batch 8 --steps 3
#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <malloc.h>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cpu_line.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace po = boost::program_options;

namespace {

struct Config {
  int64_t width = 256, layers = 8, context = 1024, batch = 8, heads = 4;
  int steps = 3;
  bool autocast = false;
  double none_peak_mib = 0;  // the dtr modes' reference: none's activation peak
};

struct Measure {
  double peak_mib = 0, step_ms = 0, cpu_ms = 0, rss_mib = 0;
  double evictions = 0, dropped = 0, recompute_ms = 0;  // per step, dtr modes
  uint64_t hash = 0;
  bool ok = false;
};

const char* kModes[] = {"none",     "full",     "attention", "products",       "alternate",        "attn+fc1",
                        "in+attn+fc2", "attn+fc1+fc2", "dtr:0.75", "dtr:0.50", "dtr:0.33"};

uint64_t grad_hash(const std::vector<mg::Tensor>& params) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& p : params)
    for (float v : p.grad().to(mg::DType::float32).to_vector<float>()) {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      h = (h ^ bits) * 1099511628211ull;
    }
  return h;
}

// This process's CPU time (all its threads), in seconds: under a shared
// machine's load it moves less than the wall clock.
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// The process's resident set ("VmRSS") or its peak since the last reset ("VmHWM"), in KiB.
int64_t resident_kib(const char* field) {
  FILE* f = std::fopen("/proc/self/status", "r");
  char line[256];
  int64_t kib = -1;
  const size_t n = std::strlen(field);
  while (f && std::fgets(line, sizeof line, f))
    if (std::strncmp(line, field, n) == 0 && line[n] == ':') kib = std::atoll(line + n + 1);
  if (f) std::fclose(f);
  return kib;
}

// Resets the process's peak resident set to its current one (Linux).
void reset_resident_peak() {
  if (FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
}

// The layer stack of one mode, and its training step.
struct GptStack {
  std::vector<std::shared_ptr<mg::nn::TransformerEncoderLayer>> layers;
  mg::autodiff::GradManager gm;
  std::vector<mg::Tensor> params;
  mg::Tensor x;
  mg::autodiff::CheckpointOptions options;
  bool wrap = false, autocast = false;
  double dtr_fraction = 0;  // dtr modes: the threshold's share of none's peak

  GptStack(const Config& c, const std::string& mode) : wrap(mode != "none"), autocast(c.autocast) {
    if (mode.rfind("dtr:", 0) == 0) dtr_fraction = std::stod(mode.substr(4));
    mg::manual_seed(0);
    for (int64_t i = 0; i < c.layers; ++i) {
      layers.push_back(std::make_shared<mg::nn::TransformerEncoderLayer>(
          c.width, c.heads,
          mg::nn::TransformerEncoderLayerOptions{.dim_feedforward = 4 * c.width, .dropout = 0.0,
                                                 .activation = mg::nn::Activation::gelu_tanh, .batch_first = true,
                                                 .norm_first = true}));
      gm.attach(layers.back()->parameters());
    }
    params = gm.attached_tensors();
    x = mg::normal({c.batch, c.context, c.width});
    if (mode == "attention") options.keep = {"scaled_dot_product_attention"};
    if (mode == "products" || mode == "alternate") options.keep = mg::autodiff::kept_products();
    if (mode == "alternate")
      options.keep_if = [](std::string_view op, int64_t n) { return op != "linear" || n % 2 == 0; };
    if (mode == "attn+fc1") {  // a layer's linears run in_proj, out_proj, fc1, fc2
      options.keep = {"linear", "scaled_dot_product_attention"};
      options.keep_if = [](std::string_view op, int64_t n) { return op != "linear" || n == 2; };
    }
    if (mode == "in+attn+fc2" || mode == "attn+fc1+fc2") {
      options.keep = {"linear", "scaled_dot_product_attention"};
      const int64_t first = mode == "in+attn+fc2" ? 0 : 2;
      options.keep_if = [first](std::string_view op, int64_t n) { return op != "linear" || n == first || n == 3; };
    }
  }

  // One step (the caller zeroes the gradients, allocated before it as in training).
  void step() {
    auto rec = gm.record();
    mg::Tensor h = x, loss;
    {
      mg::amp::autocast scope(autocast);
      for (auto& l : layers) {
        auto f = [l](const mg::Tensor& t) { return l->forward(t, {.is_causal = true}); };
        h = dtr_fraction > 0 ? mg::dtr::segment(f, h) : wrap ? mg::autodiff::checkpoint(f, h, options) : f(h);
      }
      const mg::Tensor hf = mg::F::astype(h, mg::DType::float32);
      loss = mg::F::mean(hf * hf);
    }
    gm.backward(loss);
  }
};

// One mode's steps in this process: a warm-up step, `steps` timed steps
// (their allocator peak), then one step with the allocator's cache emptied
// before it (its resident-set growth). Prints "peak_mib step_ms cpu_ms hash
// rss_peak_mib" and the DTR counts per step.
int child(const Config& c, const std::string& mode) {
  GptStack net(c, mode);
  for (auto& p : net.params) p.set_grad(mg::zeros_like(p));
  if (net.dtr_fraction > 0)
    mg::dtr::enable({.eviction_threshold = mg::allocated_bytes() +
                                           static_cast<int64_t>(net.dtr_fraction * c.none_peak_mib * (1 << 20)),
                     .evictee_minimum_size = int64_t{1} << 20});
  net.step();
  mg::dtr::reset_stats();
  std::vector<double> ms, cpu;
  int64_t peak = 0;
  for (int s = 0; s < c.steps; ++s) {
    for (auto& p : net.params) p.set_grad(mg::zeros_like(p));
    const int64_t base = mg::allocated_bytes();
    mg::reset_peak_allocated_bytes();
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_seconds();
    net.step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    cpu.push_back(1e3 * (cpu_seconds() - c0));
    peak = std::max(peak, mg::peak_allocated_bytes() - base);
  }
  const mg::dtr::Stats dtr = mg::dtr::stats();
  const uint64_t hash = grad_hash(net.params);
  for (auto& p : net.params) p.set_grad(mg::zeros_like(p));
  mg::empty_cache();  // the resident set now grows with what the step allocates
  malloc_trim(0);
  const int64_t rss_base = resident_kib("VmRSS");
  reset_resident_peak();
  net.step();
  const int64_t rss_peak = resident_kib("VmHWM") - rss_base;
  std::sort(ms.begin(), ms.end());
  std::sort(cpu.begin(), cpu.end());
  std::printf("%.3f %.3f %.3f %llu %.3f %.2f %.2f %.3f\n", static_cast<double>(peak) / (1 << 20), ms[ms.size() / 2],
              cpu[cpu.size() / 2], static_cast<unsigned long long>(hash), static_cast<double>(rss_peak) / 1024,
              static_cast<double>(dtr.evictions) / c.steps, static_cast<double>(dtr.dropped_results) / c.steps,
              1e3 * dtr.recompute_seconds / c.steps);
  return 0;
}

Measure spawn(const std::string& self, const Config& c, const std::string& mode, int64_t batch) {
  const std::string cmd = self + " --child " + mode + " --width " + std::to_string(c.width) + " --layers " +
                          std::to_string(c.layers) + " --context " + std::to_string(c.context) + " --batch " +
                          std::to_string(batch) + " --heads " + std::to_string(c.heads) + " --steps " +
                          std::to_string(c.steps) + " --none-peak-mib " + std::to_string(c.none_peak_mib) +
                          (c.autocast ? " --autocast" : "");
  Measure m;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return m;
  unsigned long long hash = 0;
  m.ok = std::fscanf(p, "%lf %lf %lf %llu %lf %lf %lf %lf", &m.peak_mib, &m.step_ms, &m.cpu_ms, &hash, &m.rss_mib,
                     &m.evictions, &m.dropped, &m.recompute_ms) == 8;
  m.hash = hash;
  m.ok = pclose(p) == 0 && m.ok;
  return m;
}

// The largest batch whose peak stays at or under `cap_mib` (doubling, then bisecting).
int64_t max_batch(const std::string& self, const Config& c, const std::string& mode, double cap_mib) {
  Config quick = c;
  quick.steps = 1;
  int64_t lo = 0, hi = c.batch;
  while (true) {
    const Measure m = spawn(self, quick, mode, hi);
    if (!m.ok || m.peak_mib > cap_mib) break;
    lo = hi;
    hi *= 2;
  }
  while (hi - lo > std::max<int64_t>(1, lo / 16)) {  // to within 1/16
    const int64_t mid = (lo + hi) / 2;
    const Measure m = spawn(self, quick, mode, mid);
    (m.ok && m.peak_mib <= cap_mib ? lo : hi) = mid;
  }
  return lo;
}

void report(const std::string& self, Config c, bool search, const std::vector<std::string>& modes) {
  std::printf("## GPT stack: width %lld, %lld layers, %lld heads, context %lld, batch %lld, %s, median of %d steps\n",
              static_cast<long long>(c.width), static_cast<long long>(c.layers), static_cast<long long>(c.heads),
              static_cast<long long>(c.context), static_cast<long long>(c.batch),
              c.autocast ? "bfloat16 autocast" : "float32", c.steps);
  std::printf("| mode | activation peak MiB | x none | resident-set growth MiB | x none | step ms | x none "
              "| step CPU ms | x none | gradients | evictions + dropped results / recomputed ms per step |%s\n",
              search ? " largest batch under none's peak |" : "");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|%s\n", search ? "---|" : "");
  Measure none;
  for (const std::string& name : modes) {
    const char* mode = name.c_str();
    const Measure m = spawn(self, c, mode, c.batch);
    if (!m.ok) {
      std::printf("| %s | failed | | | | |\n", mode);
      continue;
    }
    if (std::string(mode) == "none") {
      none = m;
      c.none_peak_mib = m.peak_mib;
    }
    std::printf("| %s | %.1f | %.2f | %.1f | %.2f | %.0f | %.2f | %.0f | %.2f | %s |", mode, m.peak_mib,
                m.peak_mib / none.peak_mib, m.rss_mib, m.rss_mib / none.rss_mib, m.step_ms, m.step_ms / none.step_ms,
                m.cpu_ms, m.cpu_ms / none.cpu_ms, m.hash == none.hash ? "bit-identical" : "DIFFER");
    if (std::string(mode).rfind("dtr:", 0) == 0)
      std::printf(" %.1f + %.1f / %.0f |", m.evictions, m.dropped, m.recompute_ms);
    else
      std::printf(" |");
    if (search) std::printf(" %lld |", static_cast<long long>(max_batch(self, c, mode, none.peak_mib)));
    std::printf("\n");
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  std::string child_mode, modes_arg;
  bool search = false, torch = false;
  po::options_description desc("bench_memory");
  desc.add_options()("help", "this text")("width", po::value(&c.width)->default_value(c.width))(
      "layers", po::value(&c.layers)->default_value(c.layers))("heads", po::value(&c.heads)->default_value(c.heads))(
      "context", po::value(&c.context)->default_value(c.context))("batch", po::value(&c.batch)->default_value(c.batch))(
      "steps", po::value(&c.steps)->default_value(c.steps))("autocast", po::bool_switch(&c.autocast),
                                                             "bfloat16 autocast")(
      "max-batch", po::bool_switch(&search), "also search each mode's largest batch under none's peak")(
      "torch", po::bool_switch(&torch), "also run bench_memory_torch.py (PyTorch's checkpoint) on the same model")(
      "child", po::value(&child_mode), "internal: run one mode and print its measures")(
      "none-peak-mib", po::value(&c.none_peak_mib), "internal: none's activation peak, for the dtr modes")(
      "modes", po::value(&modes_arg), "comma-separated modes to run (none first; default all)");
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, desc), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::printf("%s", (std::ostringstream() << desc).str().c_str());
    return 0;
  }
  if (!child_mode.empty()) {
    try {
      return child(c, child_mode);
    } catch (const std::exception& e) {  // a batch DTR cannot fit (--max-batch): the parent reads a failure
      std::fprintf(stderr, "bench_memory --child %s: %s\n", child_mode.c_str(), e.what());
      return 1;
    }
  }
  perf::print_cpu_line();
  std::vector<std::string> modes(std::begin(kModes), std::end(kModes));
  if (!modes_arg.empty()) {
    modes = {"none"};  // the reference of every ratio
    std::stringstream list(modes_arg);
    for (std::string m; std::getline(list, m, ',');) {
      if (std::find(std::begin(kModes), std::end(kModes), m) == std::end(kModes)) {
        std::fprintf(stderr, "bench_memory: unknown mode '%s'\n", m.c_str());
        return 2;
      }
      if (m != "none") modes.push_back(m);
    }
  }
  report(argv[0], c, search, modes);
  if (torch) {
    const std::string script = std::string(MIXGRAD_SOURCE_DIR) + "/tests/perf/bench_memory_torch.py";
    const std::string cmd = "python3 " + script + " --width " + std::to_string(c.width) + " --layers " +
                            std::to_string(c.layers) + " --heads " + std::to_string(c.heads) + " --context " +
                            std::to_string(c.context) + " --batch " + std::to_string(c.batch) + " --steps " +
                            std::to_string(c.steps) + (c.autocast ? " --autocast" : "");
    std::fflush(stdout);
    return std::system(cmd.c_str()) == 0 ? 0 : 1;
  }
  return 0;
}
