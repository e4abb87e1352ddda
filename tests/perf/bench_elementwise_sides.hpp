// tests/perf/bench_elementwise_sides.hpp — what the elementwise benchmark asks
// of each framework: one unary op's forward and backward over a [rows, cols]
// tensor in float32 or bfloat16, or softmax, log_softmax or cross-entropy
// along the class axis of [N, C, H, W] (a segmentation head's, where the
// exponential runs per element over strided classes). Only ABI-neutral
// types cross (see bench_sides.hpp).
//
//   auto r = perf::elementwise::make_libtorch({.op = perf::elementwise::Op::gelu});
//   r->run();   // y = gelu(x), then x's gradient given dy, dropped
#pragma once

#include <cstdint>
#include <memory>

#include "bench_sides.hpp"

namespace perf::elementwise {

/// The unary ops whose float math is more than a few instructions (each a
/// call of libm's per element unless written to vectorise), and relu, a pass
/// with next to none, for scale.
enum class Op {
  relu, exp, log, log1p, expm1, erf, tanh, sigmoid, silu, gelu, gelu_tanh, softplus, mish,
  bce_with_logits,  // against a target in [0, 1] of x's shape, mean over the elements
  softmax_classes, log_softmax_classes, cross_entropy_classes  // along axis 1 of [N, C, H, W]
};

inline constexpr Op kOps[] = {Op::relu,      Op::exp,      Op::log,     Op::log1p,          Op::expm1,
                              Op::erf,       Op::tanh,     Op::sigmoid, Op::silu,           Op::gelu,
                              Op::gelu_tanh, Op::softplus, Op::mish,    Op::bce_with_logits};

inline constexpr Op kClassOps[] = {Op::softmax_classes, Op::log_softmax_classes, Op::cross_entropy_classes};

inline const char* name(Op op) {
  constexpr const char* kNames[] = {"relu",    "exp",  "log",  "log1p",     "expm1",    "erf",  "tanh",
                                    "sigmoid", "silu", "gelu", "gelu_tanh", "softplus", "mish", "bce_with_logits",
                                    "softmax", "log_softmax", "cross_entropy"};
  return kNames[static_cast<int>(op)];
}

/// log and log1p take inputs in [0.1, 4], the others in [-4, 4].
inline bool positive_inputs(Op op) { return op == Op::log || op == Op::log1p; }

struct Config {
  Op op = Op::gelu;
  int64_t rows = 2048, cols = 2048;     // the unary ops' [rows, cols]
  int64_t n = 8, classes = 21, hw = 128;  // the class-axis ops' [n, classes, hw, hw]
  bool bf16 = false;  // input, output and gradients in bfloat16
};

inline bool class_axis(Op op) {
  return op == Op::softmax_classes || op == Op::log_softmax_classes || op == Op::cross_entropy_classes;
}

std::unique_ptr<Runner> make_mixgrad(const Config& c);
#if MIXGRAD_BENCH_LIBTORCH
std::unique_ptr<Runner> make_libtorch(const Config& c);
#endif

}  // namespace perf::elementwise
