// mixgrad/nn/activation.hpp — elementwise activations as modules, for
// Sequential. Stateless: no parameters, same in training and eval.
//
//   mg::nn::Sequential(mg::nn::Linear(784, 128), mg::nn::ReLU(), mg::nn::Linear(128, 10));
//   mg::nn::LeakyReLU(0.2);  mg::nn::GELU();  mg::nn::SiLU();  mg::nn::Tanh();  mg::nn::Sigmoid();
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
