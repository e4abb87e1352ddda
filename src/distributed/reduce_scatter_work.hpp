// A non-blocking reduce-scatter with a count per rank (MPI_Ireduce_scatter),
// for the sharded optimizer's buckets: private to src/distributed.
#pragma once

#include <vector>

#include "mixgrad/distributed/collectives.hpp"

namespace mixgrad::distributed::detail {

/// Starts reducing `send` (1-D, contiguous, the same size on every rank)
/// over the ranks: rank r receives, in `recv` (counts[r] elements of send's
/// dtype and device), the sum or mean of send's elements [sum of counts[0..r),
/// + counts[r]). float16 / bfloat16 travel as float32 and are rounded once,
/// a mean divided before that rounding, as in all_reduce_async. A CUDA
/// tensor is all-reduced in place and this rank's block copied on the
/// stream. `send` and `recv` must live until the Work is finished.
Work reduce_scatter_async(const ProcessGroup& group, const Tensor& send, const Tensor& recv,
                          const std::vector<int>& counts, ReduceOp op);

}  // namespace mixgrad::distributed::detail
