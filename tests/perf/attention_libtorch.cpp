// The LibTorch side of bench_attention: at::scaled_dot_product_attention
// forward + backward (LibTorch picks its CPU flash-attention kernel for
// these shapes). Compiled with LibTorch's headers and C++ ABI.
#include <torch/torch.h>

#include "bench_attention_sides.hpp"

namespace perf::attention {

namespace {

class TorchSdpa final : public Runner {
 public:
  explicit TorchSdpa(const Config& c) : causal_(c.causal) {
    torch::manual_seed(0);
    const auto dt = c.bf16 ? torch::kBFloat16 : torch::kFloat32;
    auto make = [&] { return torch::randn({c.batch, c.heads, c.len, c.dim}, torch::dtype(dt)).requires_grad_(true); };
    q_ = make();
    k_ = make();
    v_ = make();
    dy_ = torch::randn({c.batch, c.heads, c.len, c.dim}, torch::dtype(dt));
  }
  void run() override {
    auto y = at::scaled_dot_product_attention(q_, k_, v_, {}, 0.0, causal_);
    y.backward(dy_);
    value_ = q_.grad().index({0, 0, 0, 0}).item<double>();
    for (auto* t : {&q_, &k_, &v_}) t->mutable_grad() = torch::Tensor();
  }
  double value() const override { return value_; }

 private:
  bool causal_;
  torch::Tensor q_, k_, v_, dy_;
  double value_ = 0;
};

}  // namespace

std::unique_ptr<Runner> make_libtorch(const Config& c) { return std::make_unique<TorchSdpa>(c); }

}  // namespace perf::attention
