// tests/perf/bench_attention_sides.hpp — what the attention benchmark asks of
// each framework: scaled dot-product attention forward + backward on
// [batch, heads, len, dim] inputs, causal or not, in float32 or bfloat16.
// Only ABI-neutral types cross (see bench_sides.hpp).
//
//   auto r = perf::attention::make_libtorch({.batch = 2, .heads = 8, .len = 1024, .dim = 64, .causal = true});
//   r->run();   // forward, backward, gradients dropped
#pragma once

#include <cstdint>
#include <memory>

#include "bench_sides.hpp"

namespace perf::attention {

struct Config {
  int64_t batch = 1, heads = 8, len = 1024, dim = 64;
  bool causal = true;
  bool bf16 = false;  // inputs and gradients in bfloat16
};

/// Floating-point operations of one forward + backward (the backward's
/// five products against the forward's two, halved when causal).
inline double flops(const Config& c) {
  const double per_product = 2.0 * c.batch * c.heads * c.len * c.len * c.dim;
  return 7.0 * per_product * (c.causal ? 0.5 : 1.0);
}

std::unique_ptr<Runner> make_mixgrad(const Config& c);
#if MIXGRAD_BENCH_LIBTORCH
std::unique_ptr<Runner> make_libtorch(const Config& c);
#endif

}  // namespace perf::attention
