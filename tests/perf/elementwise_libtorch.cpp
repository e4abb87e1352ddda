// The LibTorch side of bench_elementwise: the op through at:: on a leaf that
// requires grad, then backward with dy. Compiled with LibTorch's headers and
// C++ ABI.
#include <torch/torch.h>

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
  }
  return x;
}

class TorchUnary final : public Runner {
 public:
  explicit TorchUnary(const Config& c) : op_(c.op) {
    torch::manual_seed(0);
    const auto dt = c.bf16 ? torch::kBFloat16 : torch::kFloat32;
    const double lo = positive_inputs(c.op) ? 0.1 : -4.0;
    x_ = torch::empty({c.rows, c.cols}, torch::dtype(dt)).uniform_(lo, 4.0).requires_grad_(true);
    dy_ = torch::randn({c.rows, c.cols}, torch::dtype(dt));
  }
  void run() override {
    apply(op_, x_).backward(dy_);
    value_ = x_.grad().index({0, 0}).item<double>();
    x_.mutable_grad() = torch::Tensor();
  }
  double value() const override { return value_; }

 private:
  Op op_;
  torch::Tensor x_, dy_;
  double value_ = 0;
};

}  // namespace

std::unique_ptr<Runner> make_libtorch(const Config& c) { return std::make_unique<TorchUnary>(c); }

}  // namespace perf::elementwise
