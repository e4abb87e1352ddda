#include "amp/policy.hpp"

#include <array>
#include <cstddef>

namespace mixgrad::amp {

namespace {

using P = CastPolicy;

// Indexed by OpKind, in the enum's order.
constexpr std::array kPolicy = {
    // add, sub, mul, div, pow, maximum, minimum, where, compare
    P::promote, P::promote, P::promote, P::high, P::high, P::promote, P::promote, P::promote, P::promote,
    // neg, exp, log, sqrt, rsqrt, abs, clamp, relu, leaky_relu, gelu, sigmoid, tanh, silu
    P::keep, P::high, P::high, P::high, P::high, P::keep, P::keep, P::keep, P::keep, P::keep, P::keep, P::keep, P::keep,
    // sin, cos, tan, log1p, expm1, erf, softplus, hardswish, mish: as PyTorch's
    // float32 list (tan, log1p, expm1, softplus); the rest keep the input dtype
    P::keep, P::keep, P::high, P::high, P::high, P::keep, P::high, P::keep, P::keep,
    // sum, mean, max, min, argmax, var, norm
    P::high, P::high, P::keep, P::keep, P::keep, P::high, P::high,
    // matmul, batched_matmul, linear
    P::low, P::low, P::low,
    // conv2d, max_pool2d, avg_pool2d, adaptive_avg_pool2d, batch_norm, layer_norm, dropout, softmax, log_softmax
    // batch_norm keeps a 16-bit input as it is: its kernel always computes the
    // statistics in float32 with float32 parameters and running stats, so a
    // conv -> batch_norm -> relu chain stays in 16 bits without casts.
    P::low, P::keep, P::keep, P::keep, P::keep, P::high, P::keep, P::high, P::high,
    // cross_entropy, nll_loss, mse_loss, l1_loss, binary_cross_entropy_with_logits
    P::high, P::high, P::high, P::high, P::high,
    // reshape, transpose, permute, concat, stack, narrow, squeeze, unsqueeze, broadcast_to, astype
    P::keep, P::keep, P::keep, P::promote, P::promote, P::keep, P::keep, P::keep, P::keep, P::keep,
};
static_assert(kPolicy.size() == static_cast<std::size_t>(OpKind::kCount),
              "every OpKind needs an autocast policy: add it to kPolicy in op order");

}  // namespace

CastPolicy policy(OpKind op) { return kPolicy[static_cast<std::size_t>(op)]; }

}  // namespace mixgrad::amp
