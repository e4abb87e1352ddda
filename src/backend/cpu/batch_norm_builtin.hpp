// mixgrad's own CPU batch normalization over [N, C, S] (S: the product of
// the spatial dims), for every floating dtype: float16 / bfloat16 / float32
// computed in float, float64 in double. backend/cpu/batch_norm.cpp calls it
// for everything oneDNN does not run (see there for when that is).
//
//   cpu::builtin_batch_norm_forward(args);    // same arguments as cpu::batch_norm_forward
//   cpu::builtin_batch_norm_backward(args);
//
// Work is split over channels, and when there are too few channels to keep
// every thread busy, over (channel, part of the batch) pairs too:
// batch_norm_parts() says into how many parts each channel's N rows are cut.
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

/// Parts each channel's N rows are split into for `threads` threads: 1 (the
/// work splits over channels alone, each channel handled start to end by one
/// thread while its data is in cache) when the channels share out evenly,
/// more when C is small; never more than N.
int64_t batch_norm_parts(int64_t n, int64_t c, int threads);

}  // namespace mixgrad::backend::cpu
