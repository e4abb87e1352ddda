// Benchmark: a small CNN's training step (forward, backward, SGD) with NCHW
// activations and weights against the same model after
// amp::convert_module_format and its images after convert_tensor_format
// (channels-last), in float32 and under bfloat16 autocast. The two layouts
// alternate round by round in one process, so load drifts hit both alike;
// prints the median ms per step of each and their ratio. Not a test.
// --maxpool 1 adds a ResNet stem's 3 x 3 / stride 2 / padding 1 max pooling
// after the stem (the net then runs at 16x16 and 8x8). --pool 1 times the
// poolings alone instead (forward and backward of max 2x2, max 3x3 / stride
// 2 / padding 1, avg 3x3 / stride 2 / padding 1 and the global average on a
// [batch, 64, 32, 32] activation), NCHW against channels-last.
//
//   build/tests/perf/bench_channels_last [--rounds 7] [--steps 5] [--batch 16] [--maxpool 0] [--pool 0]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <mixgrad/mixgrad.hpp>

#include "cpu_line.hpp"

namespace mg = mixgrad;
namespace nn = mixgrad::nn;
namespace F = mixgrad::F;

namespace {

// conv-bn-relu blocks at 32x32 and 16x16 with a residual add, then a pooled
// linear head: the layer mix of the benchmark CNN (with `maxpool`, a ResNet
// stem's max pooling after the stem).
struct Net : nn::Module {
  bool maxpool = false;
  std::shared_ptr<nn::Sequential> stem = register_module(
      "stem", nn::Sequential(nn::Conv2d(3, 32, 3, {.padding = 1, .bias = false}), nn::BatchNorm2d(32), nn::ReLU()));
  std::shared_ptr<nn::Sequential> body = register_module(
      "body", nn::Sequential(nn::Conv2d(32, 32, 3, {.padding = 1, .bias = false}), nn::BatchNorm2d(32), nn::ReLU()));
  std::shared_ptr<nn::Sequential> down = register_module(
      "down",
      nn::Sequential(nn::Conv2d(32, 64, 3, {.stride = 2, .padding = 1, .bias = false}), nn::BatchNorm2d(64), nn::ReLU(),
                     nn::Conv2d(64, 64, 3, {.padding = 1, .bias = false}), nn::BatchNorm2d(64), nn::ReLU()));
  std::shared_ptr<nn::Linear> head = register_module("head", nn::Linear(64, 10));
  mg::Tensor forward(const mg::Tensor& x) override {
    const mg::Tensor s = (*stem)(x);
    const mg::Tensor h = maxpool ? F::max_pool2d(s, {.kernel_size = 3, .stride = 2, .padding = 1}) : s;
    const mg::Tensor r = F::add(h, (*body)(h));
    const mg::Tensor p = F::adaptive_avg_pool2d((*down)(r), {1, 1});
    return (*head)(p.reshape({p.size(0), p.size(1)}));
  }
};

struct Side {
  std::unique_ptr<Net> net = std::make_unique<Net>();
  std::unique_ptr<mg::autodiff::GradManager> gm = std::make_unique<mg::autodiff::GradManager>();
  std::unique_ptr<mg::optim::SGD> opt;
  mg::Tensor x, labels;
  Side(const mg::Tensor& images, const mg::Tensor& y, bool channels_last, bool maxpool) : labels(y) {
    mg::manual_seed(1);
    net = std::make_unique<Net>();
    net->maxpool = maxpool;
    if (channels_last) mg::amp::convert_module_format(*net);
    x = channels_last ? mg::amp::convert_tensor_format(images) : images;
    gm->attach(net->parameters());
    opt = std::make_unique<mg::optim::SGD>(net->parameters(), mg::optim::SGDOptions{.lr = 0.01, .momentum = 0.9});
  }
  void step(bool bf16) {
    {
      mg::amp::autocast scope(bf16, mg::DType::bfloat16);
      auto rec = gm->record();
      gm->backward(F::cross_entropy((*net)(x), labels));
    }
    opt->step().clear_grad();
  }
};

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int arg(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == name) return std::atoi(argv[i + 1]);
  return fallback;
}

// Median ms of `steps` forward + backward passes of `pool` on x, for NCHW
// and channels-last copies of x alternating round by round.
void time_pool(const char* name, const std::function<mg::Tensor(const mg::Tensor&)>& pool, const mg::Tensor& x,
               int rounds, int steps) {
  const mg::Tensor cl = x.contiguous(mg::MemoryFormat::channels_last);
  // The output gradients, laid out as the outputs (made once, outside the timing).
  const mg::Tensor gy = mg::ones(pool(x).shape(), x.dtype()), gy_cl = gy.contiguous(mg::MemoryFormat::channels_last);
  auto pass = [&](const mg::Tensor& in) {
    mg::Tensor leaf = in.detach();
    mg::autodiff::GradManager gm;
    gm.attach(leaf);
    auto rec = gm.record();
    const mg::Tensor y = pool(leaf);
    gm.backward(y, &in == &x ? gy : gy_cl);
  };
  pass(x);  // warm-up: primitives created, buffers cached
  pass(cl);
  std::vector<double> t_nchw, t_nhwc;
  for (int r = 0; r < rounds; ++r)
    for (const mg::Tensor* in : {&x, &cl}) {
      const double t0 = now_ms();
      for (int i = 0; i < steps; ++i) pass(*in);
      (in == &x ? t_nchw : t_nhwc).push_back((now_ms() - t0) / steps);
    }
  const double a = median(t_nchw), b = median(t_nhwc);
  std::printf("  %-26s NCHW %7.3f ms  channels-last %7.3f ms  NCHW / channels-last %.2fx\n", name, a, b, a / b);
}

void time_pools(int64_t batch, int rounds, int steps) {
  for (mg::DType dt : {mg::DType::float32, mg::DType::bfloat16}) {
    std::printf("%s, [%lld, 64, 32, 32], forward + backward, median of %d rounds of %d:\n",
                std::string(mg::to_string(dt)).c_str(), static_cast<long long>(batch), rounds, steps);
    mg::manual_seed(3);
    const mg::Tensor x = mg::normal({batch, 64, 32, 32}, 0, 1, dt);
    time_pool("max_pool2d 2x2",
              [](const mg::Tensor& t) { return F::max_pool2d(t, {.kernel_size = 2, .stride = 2, .padding = 0}); }, x,
              rounds, steps);
    time_pool("max_pool2d 3x3 s2 p1",
              [](const mg::Tensor& t) { return F::max_pool2d(t, {.kernel_size = 3, .stride = 2, .padding = 1}); }, x,
              rounds, steps);
    time_pool("avg_pool2d 3x3 s2 p1",
              [](const mg::Tensor& t) { return F::avg_pool2d(t, {.kernel_size = 3, .stride = 2, .padding = 1}); }, x,
              rounds, steps);
    time_pool("adaptive_avg_pool2d 1x1", [](const mg::Tensor& t) { return F::adaptive_avg_pool2d(t, {1, 1}); }, x,
              rounds, steps);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = arg(argc, argv, "--rounds", 7), steps = arg(argc, argv, "--steps", 5);
  const int64_t batch = arg(argc, argv, "--batch", 16);
  const bool maxpool = arg(argc, argv, "--maxpool", 0) != 0;
  perf::print_cpu_line();
  if (arg(argc, argv, "--pool", 0) != 0) {
    time_pools(batch, rounds, steps);
    return 0;
  }
  std::printf("- small CNN train step%s, batch %lld, 3x32x32, median of %d rounds of %d steps\n",
              maxpool ? " with a stem max pool" : "", static_cast<long long>(batch), rounds, steps);
  mg::manual_seed(2);
  const mg::Tensor images = mg::normal({batch, 3, 32, 32});
  mg::Tensor labels = mg::empty({batch}, mg::DType::int64);
  for (int64_t i = 0; i < batch; ++i) labels.data<int64_t>()[i] = i % 10;
  for (bool bf16 : {false, true}) {
    Side nchw(images, labels, false, maxpool), nhwc(images, labels, true, maxpool);
    nchw.step(bf16);  // warm-up: primitives created, buffers cached
    nhwc.step(bf16);
    std::vector<double> t_nchw, t_nhwc;
    for (int r = 0; r < rounds; ++r)
      for (Side* s : {&nchw, &nhwc}) {
        const double t0 = now_ms();
        for (int i = 0; i < steps; ++i) s->step(bf16);
        (s == &nchw ? t_nchw : t_nhwc).push_back((now_ms() - t0) / steps);
      }
    const double a = median(t_nchw), b = median(t_nhwc);
    std::printf("%-18s NCHW %8.2f ms  channels-last %8.2f ms  NCHW / channels-last %.2fx\n",
                bf16 ? "bfloat16 autocast" : "float32", a, b, a / b);
  }
  return 0;
}
