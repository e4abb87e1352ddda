// mixgrad/nn/dropout.hpp — zeroes each element with probability p while
// training (scaling the others by 1 / (1 - p)); the identity in eval.
//
//   auto net = mg::nn::Sequential(mg::nn::Linear(512, 512), mg::nn::ReLU(), mg::nn::Dropout(0.5), ...);
//   net.train();   // dropout active
//   net.eval();    // dropout off
//
// The mask comes from the global generator (mg::manual_seed).
#pragma once

#include "mixgrad/nn/module.hpp"

namespace mixgrad::nn {

class Dropout : public Module {
 public:
  /// Throws ValueError unless 0 <= p < 1.
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;
  double p() const { return p_; }

 private:
  double p_;
};

}  // namespace mixgrad::nn
