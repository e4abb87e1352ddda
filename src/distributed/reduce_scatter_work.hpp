// A non-blocking reduce-scatter with a count per rank, for the sharded
// optimizer's buckets: private to src/distributed.
#pragma once

#include <vector>

#include "mixgrad/distributed/collectives.hpp"

namespace mixgrad::distributed::detail {

/// Starts reducing `send` (1-D, contiguous, the same size on every rank)
/// over the ranks: rank r receives, in `recv` (counts[r] elements of send's
/// dtype and device), the sum or mean of send's elements [sum of counts[0..r),
/// + counts[r]). On the CPU each rank sends every other its block and sums
/// what it receives, paired as recursive doubling pairs the ranks (so that
/// the bits are Open MPI's all-reduce's; point-to-point: no rank holds more
/// than its own blocks); floating dtypes only, sum or mean (DTypeError naming the
/// rank otherwise). float16 / bfloat16 travel as float32 and are rounded
/// once, a mean divided before that rounding, as in all_reduce_async. A CUDA
/// tensor is all-reduced in place and this rank's block copied on the
/// stream. `send` and `recv` must live until the Work is finished.
Work reduce_scatter_async(const ProcessGroup& group, const Tensor& send, const Tensor& recv,
                          const std::vector<int>& counts, ReduceOp op);

}  // namespace mixgrad::distributed::detail
