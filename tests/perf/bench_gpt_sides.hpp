// tests/perf/bench_gpt_sides.hpp — what the GPT benchmark asks of each
// framework: one training step (forward, cross-entropy, backward, AdamW) of
// the same character-level GPT (examples/train_char_gpt/model.hpp's: pre-norm
// layers, causal SDPA, tanh-GELU, tied output layer) on the same tokens.
// Only ABI-neutral types cross (see bench_sides.hpp).
#pragma once

#include <cstdint>
#include <memory>

#include "bench_sides.hpp"

namespace perf::gpt {

struct Config {
  int64_t vocab = 96, block = 64, layers = 4, heads = 4, embd = 128, batch = 32;
  bool bf16 = false;  // autocast to bfloat16
};

/// tokens: batch * (block + 1) int64 values in [0, vocab), read at construction.
std::unique_ptr<Runner> make_mixgrad(const Config& c, const int64_t* tokens);
#if MIXGRAD_BENCH_LIBTORCH
std::unique_ptr<Runner> make_libtorch(const Config& c, const int64_t* tokens);
#endif

}  // namespace perf::gpt
