// The work split of the CPU kernels that run along one axis of an
// [outer, axis, inner] view (backend/axis3.hpp): the indexing scatters, the
// scans and prod. A task is one outer index and a block of up to kLineBlock
// inner positions, whose lines it walks along the axis; two tasks never
// share an output position, so they need no atomics and every run adds in
// the same order.
//
//   for_line_blocks(a.outer, a.inner, x.numel(), [&](int64_t o, int64_t i0, int64_t i1) { ... });
#pragma once

#include <algorithm>
#include <cstdint>

namespace mixgrad::backend::cpu {

/// Inner positions per task: a task's running values fit a stack array.
inline constexpr int64_t kLineBlock = 256;
/// Elements below which a kernel runs on one thread.
inline constexpr int64_t kParallelWork = 1 << 15;

/// Runs f(o, i0, i1) over every (outer, block [i0, i1) of inner) pair, in
/// parallel when `work` (elements touched) is large enough.
template <class F>
void for_line_blocks(int64_t outer, int64_t inner, int64_t work, F&& f) {
  const int64_t blocks = (inner + kLineBlock - 1) / kLineBlock;
  const int64_t tasks = outer * blocks;
#pragma omp parallel for schedule(static) if (work > kParallelWork && tasks > 1)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t o = t / blocks;
    const int64_t i0 = (t % blocks) * kLineBlock;
    f(o, i0, std::min(inner, i0 + kLineBlock));
  }
}

}  // namespace mixgrad::backend::cpu
