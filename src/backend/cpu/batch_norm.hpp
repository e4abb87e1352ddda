// Internals of the CPU batch normalization kernels (backend/cpu/batch_norm.cpp)
// that tests pin down: how the work is split over threads. The kernels
// themselves are the cpu:: functions declared in backend/batch_norm.hpp.
//
//   const int64_t parts = cpu::batch_norm_parts(n, channels, omp_get_max_threads());
//
// Work is split over channels (over blocks of channels when S == 1), and
// when there are too few of those to keep every thread busy, over (channel,
// part of the batch) pairs too: batch_norm_parts() says into how many parts
// the N rows are cut.
#pragma once

#include <cstdint>

#include "backend/batch_norm.hpp"

namespace mixgrad::backend::cpu {

/// Parts the N rows of each of `units` units of work (channels, or blocks of
/// channels) are split into for `threads` threads: 1 (the work splits over
/// units alone, each handled start to end by one thread while its data is
/// in cache) when the units share out evenly, more when they are few; never
/// more than N.
int64_t batch_norm_parts(int64_t n, int64_t units, int threads);

}  // namespace mixgrad::backend::cpu
