// The LibTorch side of the training benchmark: the models of
// examples/models.hpp rebuilt with torch::nn, trained with torch::optim::SGD,
// bf16 through LibTorch's CPU autocast. Compiled only where a LibTorch is
// found, with that LibTorch's C++ ABI flag; see bench_sides.hpp for why the
// interface is ABI-neutral.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include "bench_sides.hpp"

namespace perf::libtorch_side {
namespace {

namespace tnn = torch::nn;

tnn::Conv2dOptions conv(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad, bool bias) {
  return tnn::Conv2dOptions(in, out, k).stride(stride).padding(pad).bias(bias);
}

// Mirrors models::BasicBlock.
struct BasicBlockImpl : tnn::Module {
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride)
      : conv1(register_module("conv1", tnn::Conv2d(conv(in, out, 3, stride, 1, false)))),
        bn1(register_module("bn1", tnn::BatchNorm2d(out))),
        conv2(register_module("conv2", tnn::Conv2d(conv(out, out, 3, 1, 1, false)))),
        bn2(register_module("bn2", tnn::BatchNorm2d(out))) {
    if (stride != 1 || in != out)
      shortcut = register_module("shortcut", tnn::Sequential(tnn::Conv2d(conv(in, out, 1, stride, 0, false)),
                                                             tnn::BatchNorm2d(out)));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = torch::relu(bn1->forward(conv1->forward(x)));
    y = bn2->forward(conv2->forward(y));
    return torch::relu(y + (shortcut ? shortcut->forward(x) : x));
  }
  tnn::Conv2d conv1;
  tnn::BatchNorm2d bn1;
  tnn::Conv2d conv2;
  tnn::BatchNorm2d bn2;
  tnn::Sequential shortcut{nullptr};
};
TORCH_MODULE(BasicBlock);

tnn::Sequential make_model(Model m) {
  switch (m) {
    case Model::mlp:
      return tnn::Sequential(tnn::Flatten(), tnn::Linear(784, 1024), tnn::ReLU(), tnn::Linear(1024, 1024), tnn::ReLU(),
                             tnn::Linear(1024, 10));
    case Model::cnn:
      return tnn::Sequential(tnn::Conv2d(conv(1, 32, 3, 1, 1, true)), tnn::BatchNorm2d(32), tnn::ReLU(),
                             tnn::MaxPool2d(2), tnn::Conv2d(conv(32, 64, 3, 1, 1, true)), tnn::BatchNorm2d(64),
                             tnn::ReLU(), tnn::MaxPool2d(2), tnn::Flatten(), tnn::Linear(64 * 7 * 7, 128), tnn::ReLU(),
                             tnn::Linear(128, 10));
    case Model::resnet:
      return tnn::Sequential(tnn::Conv2d(conv(1, 16, 3, 1, 1, false)), tnn::BatchNorm2d(16), tnn::ReLU(),
                             BasicBlock(16, 16, 1), BasicBlock(16, 16, 1), BasicBlock(16, 32, 2), BasicBlock(32, 32, 1),
                             BasicBlock(32, 64, 2), BasicBlock(64, 64, 1),
                             tnn::AdaptiveAvgPool2d(tnn::AdaptiveAvgPool2dOptions(1)), tnn::Flatten(),
                             tnn::Linear(64, 10));
  }
  return nullptr;
}

// LibTorch's C++ API has no autocast guard; this is what torch.autocast
// does on entry and exit (the cast cache is dropped when the outermost
// region ends).
class CpuAutocast {
 public:
  CpuAutocast() {
#if TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR >= 204  // device-type autocast API
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
#else
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
#endif
    at::autocast::increment_nesting();
  }
  ~CpuAutocast() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#if TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR >= 204  // device-type autocast API
    at::autocast::set_autocast_enabled(at::kCPU, false);
#else
    at::autocast::set_cpu_enabled(false);
#endif
  }
  CpuAutocast(const CpuAutocast&) = delete;
  CpuAutocast& operator=(const CpuAutocast&) = delete;
};

class Trainer final : public Runner {
 public:
  Trainer(Model m, Precision p)
      : net_(make_model(m)),
        opt_(net_->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9)),
        precision_(p) {
    const int64_t n = batch_size(m);
    x_ = m == Model::mlp ? torch::randn({n, 784}) : torch::randn({n, 1, 28, 28});
    y_ = torch::randint(0, 10, {n}, torch::kLong);
  }
  void run() override {
    torch::Tensor loss;
    if (precision_ == Precision::bf16) {
      CpuAutocast scope;
      loss = torch::nn::functional::cross_entropy(net_->forward(x_), y_);
    } else {
      loss = torch::nn::functional::cross_entropy(net_->forward(x_), y_);
    }
    loss.backward();
    opt_.step();
    opt_.zero_grad();
    value_ = loss.item<double>();
  }
  double value() const override { return value_; }

 private:
  tnn::Sequential net_;
  torch::optim::SGD opt_;
  Precision precision_;
  torch::Tensor x_, y_;
  double value_ = 0;
};

class Tiny final : public Runner {
 public:
  explicit Tiny(TinyOp op)
      : op_(op),
        a_(torch::randn({2, 2}).requires_grad_()),
        b_(torch::randn({2, 2}).requires_grad_()),
        dy_(op == TinyOp::sum ? torch::ones({}) : torch::ones({2, 2})) {}
  void run() override {
    switch (op_) {
      case TinyOp::add: y_ = a_ + b_; break;
      case TinyOp::mul: y_ = a_ * b_; break;
      case TinyOp::relu: y_ = torch::relu(a_); break;
      case TinyOp::sum: y_ = a_.sum(); break;
      case TinyOp::matmul: y_ = torch::matmul(a_, b_); break;
    }
    y_.backward(dy_);
    a_.mutable_grad().reset();
    b_.mutable_grad().reset();
  }
  double value() const override { return y_.sum().item<double>(); }

 private:
  TinyOp op_;
  torch::Tensor a_, b_, dy_, y_;
};

}  // namespace

std::unique_ptr<Runner> make_trainer(Model model, Precision precision) {
  torch::manual_seed(0);
  return std::make_unique<Trainer>(model, precision);
}

std::unique_ptr<Runner> make_tiny_op(TinyOp op) {
  torch::manual_seed(0);
  return std::make_unique<Tiny>(op);
}

void set_threads(int n) { torch::set_num_threads(n); }

const char* version() { return TORCH_VERSION; }

}  // namespace perf::libtorch_side
