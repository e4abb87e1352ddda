// mixgrad/nn/flatten.hpp — merges dims start_dim..end_dim into one; by
// default everything but the batch dim, between convolutions and Linear.
//
//   mg::nn::Flatten();          // [N, 64, 7, 7] -> [N, 3136]
//   mg::nn::Flatten(0);         // everything -> [N * 3136]
#pragma once

#include "mixgrad/nn/module.hpp"

namespace mixgrad::nn {

class Flatten : public Module {
 public:
  explicit Flatten(int start_dim = 1, int end_dim = -1) : start_(start_dim), end_(end_dim) {}
  /// F::flatten(x, start_dim, end_dim) (a view when x is contiguous).
  Tensor forward(const Tensor& x) override;
  std::string describe() const override;

 private:
  int start_, end_;
};

}  // namespace mixgrad::nn
