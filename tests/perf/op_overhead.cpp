// op_overhead: what one op costs beyond its arithmetic. On tiny tensors
// (float32[4], 2x2 matrices) the time is almost all fixed cost: validation,
// the autocast hook, allocation, dispatch, and, while a GradManager records,
// the tape entry and the backward closure. Two numbers per op:
//   idle       forward only, nothing recording (inference, optimizer steps)
//   recorded   forward + backward under a recording GradManager that tracks
//              the inputs (one training step of that op alone)
// Each is the median over many samples of a batch of calls, in microseconds.
// A benchmark, not a test: it prints a table and asserts nothing.
// `--idle-calls N` only runs every op's idle forward N times, untimed: the
// machine-independent measure, instructions counted by callgrind (two values
// of N, subtracted, cancel the start-up), for comparing two builds on a
// noisy or virtual machine without hardware counters.
//
//   meson test -C build --benchmark op_overhead --verbose
//   build/tests/perf/op_overhead [samples]
//   valgrind --tool=callgrind build/tests/perf/op_overhead --idle-calls 1000   (and 3000)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "cpu_line.hpp"

namespace mg = mixgrad;

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kBatch = 20;  // calls per timed sample: keeps clock reads out of the number

struct OpCase {
  std::string name;
  mg::Tensor a, b;  // b may be undefined
  std::function<mg::Tensor(const mg::Tensor&, const mg::Tensor&)> run;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median microseconds per call of `body`, over `samples` batches.
template <class Body>
double time_per_call(int samples, Body&& body) {
  for (int i = 0; i < kBatch * 5; ++i) body();  // warm caches and the allocator
  std::vector<double> us;
  us.reserve(static_cast<size_t>(samples));
  for (int s = 0; s < samples; ++s) {
    const auto t0 = Clock::now();
    for (int i = 0; i < kBatch; ++i) body();
    const auto t1 = Clock::now();
    us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / kBatch);
  }
  return median(std::move(us));
}

std::vector<OpCase> op_cases() {
  mg::manual_seed(0);
  const mg::Tensor v = mg::uniform({4}, -1.0, 1.0);
  const mg::Tensor w = mg::uniform({4}, -1.0, 1.0);
  const mg::Tensor m = mg::uniform({2, 2}, -1.0, 1.0);
  const mg::Tensor n = mg::uniform({2, 2}, -1.0, 1.0);
  const mg::Tensor logits = mg::uniform({2, 4}, -1.0, 1.0);
  const mg::Tensor w2 = mg::uniform({2, 4}, -1.0, 1.0);
  const mg::Tensor labels = mg::tensor(std::vector<int64_t>{1, 3}, {2});
  using T = const mg::Tensor&;
  return {
      {"add [4]+[4]", v, w, [](T x, T y) { return mg::F::add(x, y); }},
      {"mul [4]*[4]", v, w, [](T x, T y) { return mg::F::mul(x, y); }},
      {"add [2,4]+[4] broadcast", logits, v, [](T x, T y) { return mg::F::add(x, y); }},
      {"relu [4]", v, {}, [](T x, T) { return mg::F::relu(x); }},
      {"sum [4]", v, {}, [](T x, T) { return mg::F::sum(x); }},
      {"matmul 2x2", m, n, [](T x, T y) { return mg::F::matmul(x, y); }},
      {"linear [2,4]x[2,4]^T", logits, w2, [](T x, T y) { return mg::F::linear(x, y); }},
      {"softmax [2,4]", logits, {}, [](T x, T) { return mg::F::softmax(x, -1); }},
      {"reshape [4]->[2,2]", v, {}, [](T x, T) { return mg::F::reshape(x, {2, 2}); }},
      {"transpose 2x2", m, {}, [](T x, T) { return mg::F::transpose(x, 0, 1); }},
      {"narrow [4]->[2]", v, {}, [](T x, T) { return mg::F::narrow(x, 0, 1, 2); }},
      {"astype f32->bf16", v, {}, [](T x, T) { return mg::F::astype(x, mg::DType::bfloat16); }},
      {"clone", v, {}, [](T x, T) { return x.clone(); }},
      {"concat 2x[4]", v, w, [](T x, T y) { return mg::F::concat({x, y}, 0); }},
      {"broadcast_to [4]->[2,4]", v, {}, [](T x, T) { return mg::F::broadcast_to(x, {2, 4}); }},
      {"mse_loss [4]", v, w, [](T x, T y) { return mg::F::mse_loss(x, y); }},
      {"cross_entropy [2,4]", logits, labels, [](T x, T y) { return mg::F::cross_entropy(x, y); }},
      {"layer_norm [2,4]", logits, {}, [](T x, T) { return mg::F::layer_norm(x, {4}); }},
      {"dropout [4] p=0.5", v, {}, [](T x, T) { return mg::F::dropout(x, 0.5); }},
  };
}

}  // namespace

int main(int argc, char** argv) {
  mg::set_num_threads(1);
  if (argc > 2 && std::string(argv[1]) == "--idle-calls") {
    std::vector<OpCase> cases = op_cases();
    for (int i = std::atoi(argv[2]); i > 0; --i)
      for (OpCase& c : cases) (void)c.run(c.a, c.b);
    return 0;
  }
  perf::print_cpu_line();
  const int samples = argc > 1 ? std::max(1, std::atoi(argv[1])) : 300;

  std::printf("op_overhead: median microseconds per call over %d samples of %d calls\n", samples, kBatch);
  std::printf("%-26s %12s %20s\n", "op", "idle fwd", "recorded fwd+bwd");
  for (OpCase& c : op_cases()) {
    const double idle = time_per_call(samples, [&] { (void)c.run(c.a, c.b); });

    mg::autodiff::GradManager gm;
    gm.attach(c.a);
    if (c.b.defined() && mg::is_floating_point(c.b.dtype())) gm.attach(c.b);
    const mg::Tensor dy = mg::ones_like(c.run(c.a, c.b));
    const double recorded = time_per_call(samples, [&] {
      auto recording = gm.record();
      const mg::Tensor y = c.run(c.a, c.b);
      gm.backward(y, dy);
    });
    std::printf("%-26s %12.2f %20.2f\n", c.name.c_str(), idle, recorded);
  }
  return 0;
}
