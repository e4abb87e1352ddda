// Every user-visible op, by name. The autocast policy table is indexed by
// this enum (amp/policy.cpp), and a static_assert there ties the table's
// size to kCount: adding an op without choosing its policy does not compile.
#pragma once

#include <cstdint>

namespace mixgrad {

enum class OpKind : uint16_t {
  // elementwise binary
  add, sub, mul, div, pow, maximum, minimum, where, compare,
  // elementwise unary
  neg, exp, log, sqrt, rsqrt, abs, clamp, relu, leaky_relu, gelu, sigmoid, tanh, silu,
  sin, cos, tan, log1p, expm1, erf, softplus, hardswish, mish,
  // reductions
  sum, mean, max, min, argmax, var, norm,
  // linear algebra
  matmul, batched_matmul, linear,
  // neural network
  conv2d, max_pool2d, avg_pool2d, adaptive_avg_pool2d, batch_norm, layer_norm, dropout, softmax, log_softmax,
  // losses
  cross_entropy, nll_loss, mse_loss, l1_loss, binary_cross_entropy_with_logits,
  // shape and type
  reshape, transpose, permute, concat, stack, narrow, squeeze, unsqueeze, broadcast_to, astype,
  kCount
};

}  // namespace mixgrad
