// Benchmark: a small CNN's training step (forward, backward, SGD) with NCHW
// activations and weights against the same model after
// amp::convert_module_format and its images after convert_tensor_format
// (channels-last), in float32 and under bfloat16 autocast. The two layouts
// alternate round by round in one process, so load drifts hit both alike;
// prints the median ms per step of each and their ratio. Not a test.
//
//   build/tests/perf/bench_channels_last [--rounds 7] [--steps 5] [--batch 16]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
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
// linear head: the layer mix of the benchmark CNN.
struct Net : nn::Module {
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
    const mg::Tensor h = (*stem)(x);
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
  Side(const mg::Tensor& images, const mg::Tensor& y, bool channels_last) : labels(y) {
    mg::manual_seed(1);
    net = std::make_unique<Net>();
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

}  // namespace

int main(int argc, char** argv) {
  const int rounds = arg(argc, argv, "--rounds", 7), steps = arg(argc, argv, "--steps", 5);
  const int64_t batch = arg(argc, argv, "--batch", 16);
  perf::print_cpu_line();
  std::printf("- small CNN train step, batch %lld, 3x32x32, median of %d rounds of %d steps\n",
              static_cast<long long>(batch), rounds, steps);
  mg::manual_seed(2);
  const mg::Tensor images = mg::normal({batch, 3, 32, 32});
  mg::Tensor labels = mg::empty({batch}, mg::DType::int64);
  for (int64_t i = 0; i < batch; ++i) labels.data<int64_t>()[i] = i % 10;
  for (bool bf16 : {false, true}) {
    Side nchw(images, labels, false), nhwc(images, labels, true);
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
