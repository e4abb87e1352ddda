// mixgrad/nn/init.hpp — in-place initialisers for parameters (PyTorch's
// torch.nn.init). Each fills the given tensor's storage, is not recorded by
// any GradManager, draws from the global generator (mg::manual_seed) and
// returns the same handle.
//
//   namespace init = mg::nn::init;
//   init::kaiming_normal_(conv.weight(), {.mode = init::FanMode::fan_out, .nonlinearity = init::Nonlinearity::relu});
//   init::zeros_(conv.bias());
//   init::xavier_uniform_(fc.weight());
//
// Fans follow PyTorch: for a weight [out, in, k...], fan_in = in * prod(k)
// and fan_out = out * prod(k).
#pragma once

#include <cstdint>
#include <utility>

#include "mixgrad/tensor.hpp"

namespace mixgrad::nn::init {

enum class FanMode : uint8_t { fan_in, fan_out };
enum class Nonlinearity : uint8_t { linear, sigmoid, tanh, relu, leaky_relu };

/// The recommended gain for a nonlinearity: 1 (linear, sigmoid), 5/3 (tanh),
/// sqrt(2) (relu), sqrt(2 / (1 + slope^2)) (leaky_relu with `param` = slope).
double calculate_gain(Nonlinearity nonlinearity, double param = 0.01);

/// (fan_in, fan_out) of a weight shape; ShapeError for fewer than 2 dims.
std::pair<int64_t, int64_t> fan_in_and_fan_out(const Shape& shape);

struct KaimingOptions {
  double a = 0.0;  // negative slope of the leaky_relu that follows
  FanMode mode = FanMode::fan_in;
  Nonlinearity nonlinearity = Nonlinearity::leaky_relu;
};

/// U(-b, b) with b = gain * sqrt(3 / fan) (He et al. 2015).
Tensor kaiming_uniform_(const Tensor& t, const KaimingOptions& options = {});
/// N(0, std^2) with std = gain / sqrt(fan).
Tensor kaiming_normal_(const Tensor& t, const KaimingOptions& options = {});
/// U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio 2010).
Tensor xavier_uniform_(const Tensor& t, double gain = 1.0);
/// N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(const Tensor& t, double gain = 1.0);
/// U(low, high).
Tensor uniform_(const Tensor& t, double low = 0.0, double high = 1.0);
/// N(mean, std^2).
Tensor normal_(const Tensor& t, double mean = 0.0, double std = 1.0);
/// Every element set to `value`.
Tensor constant_(const Tensor& t, double value);
Tensor zeros_(const Tensor& t);
Tensor ones_(const Tensor& t);

}  // namespace mixgrad::nn::init
