// mixgrad/nn/activation.hpp — elementwise activations as modules, for
// Sequential. Stateless (no parameters, same in training and eval) but for
// PReLU, whose slopes are learned.
//
//   mg::nn::Sequential(mg::nn::Linear(784, 128), mg::nn::ReLU(), mg::nn::Linear(128, 10));
//   mg::nn::LeakyReLU(0.2);  mg::nn::GELU();  mg::nn::SiLU();  mg::nn::Tanh();  mg::nn::Sigmoid();
//   mg::nn::Softplus(/*beta=*/2.0);  mg::nn::Hardswish();  mg::nn::Mish();
//   mg::nn::PReLU();  mg::nn::PReLU(/*num_parameters=*/64, /*init=*/0.25);   // one slope, or one per channel
#pragma once

#include "mixgrad/nn/module.hpp"

namespace mixgrad::nn {

/// max(x, 0).
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string describe() const override { return "ReLU()"; }
};

/// x for x >= 0, negative_slope * x otherwise.
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : slope_(negative_slope) {}
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

 private:
  double slope_;
};

/// F::prelu with a learned `weight` of num_parameters slopes (1, or the
/// input's channel count C, dim 1), each initialised to `init` (PyTorch's
/// nn.PReLU). Throws ValueError unless num_parameters >= 1.
class PReLU : public Module {
 public:
  explicit PReLU(int64_t num_parameters = 1, double init = 0.25);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;
  const Tensor& weight() const { return weight_; }

 private:
  int64_t num_parameters_;
  Tensor weight_;
};

/// x * Phi(x), the exact (erf) form.
class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string describe() const override { return "GELU()"; }
};

/// x * sigmoid(x).
class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string describe() const override { return "SiLU()"; }
};

/// log(1 + e^(beta x)) / beta, linear where beta x > threshold (F::softplus).
class Softplus : public Module {
 public:
  explicit Softplus(double beta = 1.0, double threshold = 20.0) : beta_(beta), threshold_(threshold) {}
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

 private:
  double beta_;
  double threshold_;
};

/// x * relu6(x + 3) / 6.
class Hardswish : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string describe() const override { return "Hardswish()"; }
};

/// x * tanh(softplus(x)).
class Mish : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string describe() const override { return "Mish()"; }
};

class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string describe() const override { return "Sigmoid()"; }
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string describe() const override { return "Tanh()"; }
};

/// Returns its input: a placeholder in a Sequential.
class Identity : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
  std::string describe() const override { return "Identity()"; }
};

}  // namespace mixgrad::nn
