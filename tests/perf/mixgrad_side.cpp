// The mixgrad side of the training benchmark: the models of
// examples/models.hpp trained with GradManager and optim::SGD, bf16 through
// an amp::autocast scope around forward and loss (no GradScaler: bf16 has
// float32's exponent range), fp16 (on CUDA, or on the CPU with
// --precisions) through a float16 autocast scope and an amp::GradScaler's
// automatic gear.
#include <optional>
#include <random>
#include <vector>

#include "bench_sides.hpp"
#include "mixgrad/mixgrad.hpp"
#include "mixgrad/nn.hpp"
#include "mixgrad/optim.hpp"
#include "models.hpp"

namespace perf::mixgrad_side {
namespace {

namespace mg = mixgrad;
namespace F = mixgrad::F;

mg::Device to_device(int device) { return device == kCpu ? mg::Device::cpu() : mg::Device::cuda(device); }

mg::nn::Sequential make_model(Model m) {
  switch (m) {
    case Model::mlp: return models::make_mlp();
    case Model::cnn: return models::make_cnn();
    case Model::resnet: return models::make_resnet();
    case Model::mlp_large:
      return mg::nn::Sequential(mg::nn::Linear(kLargeWidth, kLargeWidth), mg::nn::ReLU(),
                                mg::nn::Linear(kLargeWidth, kLargeWidth), mg::nn::ReLU(),
                                mg::nn::Linear(kLargeWidth, models::kClasses));
  }
  return mg::nn::Sequential();
}

// The model on `device`, before the optimizer sees its parameters.
mg::nn::Sequential make_model_on(Model m, int device) {
  mg::nn::Sequential net = make_model(m);
  if (device != kCpu) net.to(to_device(device));
  return net;
}

mg::Tensor random_input(Model m) {
  const int64_t n = batch_size(m);
  switch (m) {
    case Model::mlp: return mg::normal({n, 784});
    case Model::mlp_large: return mg::normal({n, kLargeWidth});
    default: return mg::normal({n, 1, 28, 28});
  }
}

mg::Tensor random_labels(int64_t n) {
  std::mt19937 gen(1);
  std::uniform_int_distribution<int64_t> pick(0, models::kClasses - 1);
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (auto& l : v) l = pick(gen);
  return mg::tensor(v, {n});
}

class Trainer final : public Runner {
 public:
  Trainer(Model m, Precision p, int device)
      : net_(make_model_on(m, device)), opt_(net_.parameters(), {.lr = 0.01, .momentum = 0.9}), precision_(p) {
    gm_.attach(net_.parameters());
    const mg::Device d = to_device(device);
    x_ = random_input(m).to(d);
    y_ = random_labels(batch_size(m)).to(d);
    if (p == Precision::fp16) scaler_.emplace();
  }
  // The loss stays a tensor: reading it on the host each step would
  // synchronise a CUDA step (value() reads it when asked).
  void run() override {
    {
      auto recording = gm_.record();
      if (precision_ == Precision::fp32) {
        loss_ = F::cross_entropy(net_(x_), y_);
      } else {
        mg::amp::autocast scope(true, precision_ == Precision::fp16 ? mg::DType::float16 : mg::DType::bfloat16);
        loss_ = F::cross_entropy(net_(x_), y_);
      }
      if (scaler_) {
        scaler_->backward(gm_, loss_);  // scale, backward, unscale, update: the optimizer skips an overflow
      } else {
        gm_.backward(loss_);
      }
    }
    opt_.step().clear_grad();
  }
  double value() const override { return loss_.defined() ? loss_.item<double>() : 0.0; }

 private:
  mg::nn::Sequential net_;
  mg::optim::SGD opt_;
  mg::autodiff::GradManager gm_;
  Precision precision_;
  std::optional<mg::amp::GradScaler> scaler_;
  mg::Tensor x_, y_, loss_;
};

class Matmul final : public Runner {
 public:
  Matmul(int64_t m, int64_t k, int64_t n, Precision p, int device) {
    const mg::DType dt = p == Precision::fp32   ? mg::DType::float32
                         : p == Precision::fp16 ? mg::DType::float16
                                                : mg::DType::bfloat16;
    a_ = mg::normal({m, k}).to(dt).to(to_device(device));
    b_ = mg::normal({k, n}).to(dt).to(to_device(device));
  }
  void run() override { c_ = F::matmul(a_, b_); }
  double value() const override { return c_.defined() ? F::sum(c_.to(mg::DType::float32)).item<double>() : 0.0; }

 private:
  mg::Tensor a_, b_, c_;
};

class Tiny final : public Runner {
 public:
  explicit Tiny(TinyOp op)
      : op_(op),
        a_(mg::normal({2, 2})),
        b_(mg::normal({2, 2})),
        dy_(op == TinyOp::sum ? mg::scalar(1.0) : mg::ones({2, 2})) {
    gm_.attach({a_, b_});
  }
  void run() override {
    {
      auto recording = gm_.record();
      switch (op_) {
        case TinyOp::add: y_ = a_ + b_; break;
        case TinyOp::mul: y_ = a_ * b_; break;
        case TinyOp::relu: y_ = F::relu(a_); break;
        case TinyOp::sum: y_ = F::sum(a_); break;
        case TinyOp::matmul: y_ = F::matmul(a_, b_); break;
      }
      gm_.backward(y_, dy_);
    }
    a_.set_grad(mg::Tensor());
    b_.set_grad(mg::Tensor());
  }
  double value() const override { return F::sum(y_).item<double>(); }

 private:
  TinyOp op_;
  mg::autodiff::GradManager gm_;
  mg::Tensor a_, b_, dy_, y_;
};

}  // namespace

std::unique_ptr<Runner> make_trainer(Model model, Precision precision, int device) {
  mg::manual_seed(0);
  return std::make_unique<Trainer>(model, precision, device);
}

std::unique_ptr<Runner> make_matmul(int64_t m, int64_t k, int64_t n, Precision precision, int device) {
  mg::manual_seed(0);
  return std::make_unique<Matmul>(m, k, n, precision, device);
}

int cuda_device_count(const char** why) {
  const int n = mg::cuda::device_count();
  if (n == 0 && why) *why = "mixgrad sees no CUDA device (no GPU, no driver, or a build without its CUDA backend)";
  return n;
}

void synchronize(int device) {
  if (device != kCpu) mg::cuda::synchronize(device);
}

int64_t peak_memory(int device) { return device == kCpu ? -1 : mg::cuda::memory_stats(device).peak_allocated; }

void reset_peak_memory(int device) {
  if (device != kCpu) mg::cuda::reset_peak_memory_stats(device);
}

std::unique_ptr<Runner> make_tiny_op(TinyOp op) {
  mg::manual_seed(0);
  return std::make_unique<Tiny>(op);
}

void set_threads(int n) { mg::set_num_threads(n); }

const char* version() { return MIXGRAD_BENCH_VERSION; }

}  // namespace perf::mixgrad_side
