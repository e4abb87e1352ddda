// What turns GradReducer's bucket all-reduce into the sharded optimizer's
// reduce-scatter during backward (private to src/distributed).
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "mixgrad/tensor.hpp"

namespace mixgrad::distributed::detail {

/// A run [flat_begin, flat_begin + length) of the flat parameter vector.
using FlatRun = std::pair<int64_t, int64_t>;

/// The sharded optimizer's layout for GradReducer: the buckets are laid out
/// at once, in the reverse order of `tensors` (the order backward usually
/// makes their gradients), each bucket's elements in flat order, so that
/// rank r's part of a bucket (what lies in [r * per_rank, (r + 1) *
/// per_rank) of the flat vector) is one block; a bucket is reduce-scattered
/// and its buffer freed once `deliver` has taken this rank's block; at most
/// two buckets are held at once (a third waits for the oldest). The
/// gradient callback returns nothing: the caller decides what .grad() keeps.
struct ShardScatter {
  std::vector<Tensor> tensors;  // the parameters, in the flat order
  int64_t per_rank = 1;
  /// This rank's reduced elements of one bucket: `values` holds the runs end
  /// to end, in the order given.
  std::function<void(const std::vector<FlatRun>& runs, const Tensor& values)> deliver;
};

}  // namespace mixgrad::distributed::detail
