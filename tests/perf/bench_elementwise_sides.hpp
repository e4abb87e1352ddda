// tests/perf/bench_elementwise_sides.hpp — what the elementwise benchmark asks
// of each framework: one unary op's forward and backward over a [rows, cols]
// tensor in float32 or bfloat16. Only ABI-neutral types cross (see
// bench_sides.hpp).
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
enum class Op { relu, exp, log, log1p, expm1, erf, tanh, sigmoid, silu, gelu, gelu_tanh, softplus, mish };

inline constexpr Op kOps[] = {Op::relu,  Op::exp,     Op::log,  Op::log1p, Op::expm1,     Op::erf,      Op::tanh,
                              Op::sigmoid, Op::silu, Op::gelu, Op::gelu_tanh, Op::softplus, Op::mish};

inline const char* name(Op op) {
  constexpr const char* kNames[] = {"relu", "exp",  "log",  "log1p",     "expm1",    "erf", "tanh",
                                    "sigmoid", "silu", "gelu", "gelu_tanh", "softplus", "mish"};
  return kNames[static_cast<int>(op)];
}

/// log and log1p take inputs in [0.1, 4], the others in [-4, 4].
inline bool positive_inputs(Op op) { return op == Op::log || op == Op::log1p; }

struct Config {
  Op op = Op::gelu;
  int64_t rows = 2048, cols = 2048;
  bool bf16 = false;  // input, output and gradients in bfloat16
};

std::unique_ptr<Runner> make_mixgrad(const Config& c);
#if MIXGRAD_BENCH_LIBTORCH
std::unique_ptr<Runner> make_libtorch(const Config& c);
#endif

}  // namespace perf::elementwise
