// mixgrad's own CPU batch normalization over [N, C, S] (S: the product of
// the spatial dims), for every floating dtype: float16 / bfloat16 / float32
// computed in float, float64 in double. backend/cpu/batch_norm.cpp calls it
// for everything oneDNN does not run (see there for when that is).
//
//   cpu::builtin_batch_norm_forward(args);    // same arguments as cpu::batch_norm_forward
//   cpu::builtin_batch_norm_backward(args);
//
// Work is split over channels (over blocks of channels when S == 1), and
// when there are too few of those to keep every thread busy, over (channel,
// part of the batch) pairs too: batch_norm_parts() says into how many parts
// the N rows are cut.
#pragma once

#include <cstdint>

#include "backend/batch_norm.hpp"

namespace mixgrad::backend::cpu {

/// Forward (statistics in training, then the normalisation), in place of
/// batch_norm_forward's oneDNN path.
void builtin_batch_norm_forward(const BatchNormForward& a);

/// Backward (parameter gradients and input gradient), in place of
/// batch_norm_backward's oneDNN path.
void builtin_batch_norm_backward(const BatchNormBackward& a);

/// Parts the N rows of each of `units` units of work (channels, or blocks of
/// channels) are split into for `threads` threads: 1 (the work splits over
/// units alone, each handled start to end by one thread while its data is
/// in cache) when the units share out evenly, more when they are few; never
/// more than N.
int64_t batch_norm_parts(int64_t n, int64_t units, int threads);

}  // namespace mixgrad::backend::cpu
