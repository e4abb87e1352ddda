// The mixgrad side of the training benchmark: the models of
// examples/models.hpp trained with GradManager and optim::SGD, bf16 through
// an amp::autocast scope around forward and loss (no GradScaler: bf16 has
// float32's exponent range).
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

mg::nn::Sequential make_model(Model m) {
  switch (m) {
    case Model::mlp: return models::make_mlp();
    case Model::cnn: return models::make_cnn();
    case Model::resnet: return models::make_resnet();
  }
  return mg::nn::Sequential();
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
  Trainer(Model m, Precision p)
      : net_(make_model(m)), opt_(net_.parameters(), {.lr = 0.01, .momentum = 0.9}), precision_(p) {
    gm_.attach(net_.parameters());
    const int64_t n = batch_size(m);
    x_ = m == Model::mlp ? mg::normal({n, 784}) : mg::normal({n, 1, 28, 28});
    y_ = random_labels(n);
  }
  void run() override {
    mg::Tensor loss;
    {
      auto recording = gm_.record();
      if (precision_ == Precision::bf16) {
        mg::amp::autocast scope;
        loss = F::cross_entropy(net_(x_), y_);
      } else {
        loss = F::cross_entropy(net_(x_), y_);
      }
      gm_.backward(loss);
    }
    opt_.step().clear_grad();
    value_ = loss.item<double>();
  }
  double value() const override { return value_; }

 private:
  mg::nn::Sequential net_;
  mg::optim::SGD opt_;
  mg::autodiff::GradManager gm_;
  Precision precision_;
  mg::Tensor x_, y_;
  double value_ = 0;
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

std::unique_ptr<Runner> make_trainer(Model model, Precision precision) {
  mg::manual_seed(0);
  return std::make_unique<Trainer>(model, precision);
}

std::unique_ptr<Runner> make_tiny_op(TinyOp op) {
  mg::manual_seed(0);
  return std::make_unique<Tiny>(op);
}

void set_threads(int n) { mg::set_num_threads(n); }

const char* version() { return MIXGRAD_BENCH_VERSION; }

}  // namespace perf::mixgrad_side
