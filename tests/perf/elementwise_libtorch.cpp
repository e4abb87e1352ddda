// The LibTorch side of bench_elementwise: the op through at:: on a leaf that
// requires grad, then backward with dy. Compiled with LibTorch's headers and
// C++ ABI.
#include <torch/torch.h>

#include <vector>

#include "bench_elementwise_sides.hpp"

namespace perf::elementwise {

namespace {

torch::Tensor apply(Op op, const torch::Tensor& x) {
  switch (op) {
    case Op::relu: return torch::relu(x);
    case Op::exp: return torch::exp(x);
    case Op::log: return torch::log(x);
    case Op::log1p: return torch::log1p(x);
    case Op::expm1: return torch::expm1(x);
    case Op::erf: return torch::erf(x);
    case Op::tanh: return torch::tanh(x);
    case Op::sigmoid: return torch::sigmoid(x);
    case Op::silu: return at::silu(x);
    case Op::gelu: return at::gelu(x);
    case Op::gelu_tanh: return at::gelu(x, "tanh");
    case Op::softplus: return at::softplus(x, 1.0, 20.0);
    case Op::mish: return at::mish(x);
    case Op::softmax_classes: return torch::softmax(x, 1);
    case Op::log_softmax_classes: return torch::log_softmax(x, 1);
    case Op::bce_with_logits:
    case Op::cross_entropy_classes: break;  // take targets: see run()
  }
  return x;
}

class TorchUnary final : public Runner {
 public:
  explicit TorchUnary(const Config& c) : op_(c.op) {
    torch::manual_seed(0);
    const auto dt = c.bf16 ? torch::kBFloat16 : torch::kFloat32;
    const double lo = positive_inputs(c.op) ? 0.1 : -4.0;
    const std::vector<int64_t> shape =
        class_axis(c.op) ? std::vector<int64_t>{c.n, c.classes, c.hw, c.hw} : std::vector<int64_t>{c.rows, c.cols};
    x_ = torch::empty(shape, torch::dtype(dt)).uniform_(lo, 4.0).requires_grad_(true);
    dy_ = torch::randn(shape, torch::dtype(dt));
    labels_ = torch::randint(c.classes, {c.n, c.hw, c.hw}, torch::dtype(torch::kInt64));
    target_ = torch::rand(shape, torch::dtype(dt));
  }
  void run() override {
    if (op_ == Op::cross_entropy_classes) torch::nn::functional::cross_entropy(x_, labels_).backward();
    else if (op_ == Op::bce_with_logits)
      torch::nn::functional::binary_cross_entropy_with_logits(x_, target_).backward();
    else apply(op_, x_).backward(dy_);
    value_ = x_.grad().reshape({-1}).index({0}).item<double>();
    x_.mutable_grad() = torch::Tensor();
  }
  double value() const override { return value_; }

 private:
  Op op_;
  torch::Tensor x_, dy_, labels_, target_;
  double value_ = 0;
};

}  // namespace

std::unique_ptr<Runner> make_libtorch(const Config& c) { return std::make_unique<TorchUnary>(c); }

}  // namespace perf::elementwise
