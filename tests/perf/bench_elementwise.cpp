// The unary ops whose math is more than a few instructions (exp, log, erf,
// the GELUs, softplus, mish, ...), forward + backward over a [2048, 2048]
// tensor, mixgrad against LibTorch in the same process, float32 and
// bfloat16; relu, a pass with next to no arithmetic, for scale; and binary
// cross-entropy with logits (mean) over the same tensor. Then
// softmax, log_softmax and cross-entropy along the classes of
// [8, 21, 128, 128] (a segmentation head's), float32. Prints Markdown tables
// and the command.
//
//   build/tests/perf/bench_elementwise [--rounds 5] [--reps 2] [--threads 2]
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench_elementwise_sides.hpp"
#include "bench_harness.hpp"
#include "cpu_line.hpp"
#include "mixgrad/mixgrad.hpp"

namespace perf::elementwise {

namespace {

namespace mg = mixgrad;
namespace F = mixgrad::F;

mg::Tensor apply(Op op, const mg::Tensor& x) {
  switch (op) {
    case Op::relu: return F::relu(x);
    case Op::exp: return F::exp(x);
    case Op::log: return F::log(x);
    case Op::log1p: return F::log1p(x);
    case Op::expm1: return F::expm1(x);
    case Op::erf: return F::erf(x);
    case Op::tanh: return F::tanh(x);
    case Op::sigmoid: return F::sigmoid(x);
    case Op::silu: return F::silu(x);
    case Op::gelu: return F::gelu(x);
    case Op::gelu_tanh: return F::gelu(x, F::GeluApproximation::tanh);
    case Op::softplus: return F::softplus(x);
    case Op::mish: return F::mish(x);
    case Op::softmax_classes: return F::softmax(x, 1);
    case Op::log_softmax_classes: return F::log_softmax(x, 1);
    case Op::bce_with_logits:
    case Op::cross_entropy_classes: break;  // take targets: see run()
  }
  return x;
}

class MixgradUnary final : public Runner {
 public:
  explicit MixgradUnary(const Config& c) : op_(c.op) {
    const auto dt = c.bf16 ? mg::DType::bfloat16 : mg::DType::float32;
    mg::manual_seed(0);
    const mg::Shape shape = class_axis(c.op) ? mg::Shape{c.n, c.classes, c.hw, c.hw} : mg::Shape{c.rows, c.cols};
    x_ = mg::uniform(shape, positive_inputs(c.op) ? 0.1 : -4.0, 4.0, dt);
    dy_ = mg::normal(shape, 0.0, 1.0, dt);
    // Truncated toward zero: uniform labels in [0, classes).
    labels_ = F::astype(mg::uniform({c.n, c.hw, c.hw}, 0.0, static_cast<double>(c.classes) - 0.01), mg::DType::int64);
    target_ = mg::uniform(shape, 0.0, 1.0, dt);
    gm_.attach(x_);
  }
  void run() override {
    {
      auto rec = gm_.record();
      if (op_ == Op::cross_entropy_classes) gm_.backward(F::cross_entropy(x_, labels_));
      else if (op_ == Op::bce_with_logits) gm_.backward(F::binary_cross_entropy_with_logits(x_, target_));
      else gm_.backward(apply(op_, x_), dy_);
    }
    value_ = F::narrow(F::reshape(x_.grad(), {-1}), 0, 0, 1).item<double>();
    x_.set_grad(mg::Tensor());
  }
  double value() const override { return value_; }

 private:
  Op op_;
  mg::Tensor x_, dy_, labels_, target_;
  mg::autodiff::GradManager gm_;
  double value_ = 0;
};

}  // namespace

std::unique_ptr<Runner> make_mixgrad(const Config& c) { return std::make_unique<MixgradUnary>(c); }

}  // namespace perf::elementwise

int main(int argc, char** argv) {
  using namespace perf;
  using perf::elementwise::Config;
  print_cpu_line();
  keep_freed_memory();
  TimingOptions timing{.warmup = 2, .rounds = 5, .reps = 2};
  int threads = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) { std::fprintf(stderr, "bench_elementwise: %s needs a value\n", argv[i]); return 2; }
    if (k == "--rounds") timing.rounds = std::atoi(argv[++i]);
    else if (k == "--reps") timing.reps = std::atoi(argv[++i]);
    else if (k == "--threads") threads = std::atoi(argv[++i]);
    else { std::fprintf(stderr, "bench_elementwise: unknown option %s\n", argv[i]); return 2; }
  }
  mixgrad::set_num_threads(threads);
#if MIXGRAD_BENCH_LIBTORCH
  libtorch_side::set_threads(threads);
  std::printf("LibTorch %s, %d threads\n\n", libtorch_side::version(), threads);
#endif
  std::printf("command: bench_elementwise --rounds %d --reps %d --threads %d\n\n", timing.rounds, timing.reps, threads);
  std::printf("Forward + backward of y = op(x), x and dy [2048, 2048]: median ms over rounds\n\n");

  Table t({"op", "dtype", "mixgrad ms", "LibTorch ms", "mixgrad / LibTorch"});
  auto measure = [&](const Config& c, Table& table) {
    std::vector<std::function<void()>> contenders;
    auto mine = elementwise::make_mixgrad(c);
    contenders.push_back([&] { mine->run(); });
#if MIXGRAD_BENCH_LIBTORCH
    auto theirs = elementwise::make_libtorch(c);
    contenders.push_back([&] { theirs->run(); });
#endif
    const auto st = alternate(contenders, timing);
    std::vector<std::string> row = {elementwise::name(c.op), c.bf16 ? "bf16" : "fp32", fixed(st[0].median, 2)};
    if (st.size() > 1) {
      row.push_back(fixed(st[1].median, 2));
      row.push_back(fixed(st[0].median / st[1].median, 2));
    }
    table.row(row);
  };
  for (bool bf16 : {false, true})
    for (elementwise::Op op : elementwise::kOps) measure({.op = op, .bf16 = bf16}, t);
  t.print();

  std::printf("\nAlong axis 1 (the classes) of [8, 21, 128, 128]: softmax and log_softmax forward + backward, "
              "cross-entropy (mean over the positions) forward + backward; median ms over rounds\n\n");
  Table classes({"op", "dtype", "mixgrad ms", "LibTorch ms", "mixgrad / LibTorch"});
  for (elementwise::Op op : elementwise::kClassOps) measure({.op = op}, classes);
  classes.print();
  return 0;
}
