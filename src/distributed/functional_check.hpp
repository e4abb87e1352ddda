// The agreement check of distributed::functional: before a collective moves
// anything, the ranks exchange a description of their call (the op, root,
// axes and the tensor's dtype, device type and shape) and every rank checks
// the same table, so a mismatch throws the same typed exception on every
// rank instead of leaving some of them waiting.
#pragma once

#include "mixgrad/distributed/process_group.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::distributed::detail {

enum class Collective : int {
  all_reduce_sum = 1,
  all_reduce_max,
  all_reduce_min,
  all_gather,
  reduce_scatter_sum,
  broadcast,
  reduce_sum,
  gather,
  scatter,
  all_to_all,
};

/// "all_gather", ...
const char* name_of(Collective op);

/// One rank's call.
struct Call {
  Collective op;
  int root = 0;
  int axis = 0;   // all_gather, reduce_scatter_sum, gather, scatter; all_to_all's split axis
  int axis2 = 0;  // all_to_all's concat axis
};

/// The axes of a call that every rank agreed on, made non-negative.
struct Agreed {
  int axis = 0;
  int axis2 = 0;
};

/// Exchanges `call` and x's description with every rank and throws when
/// the ranks disagree or the call is not valid (see functional.hpp for the
/// exception types). Nothing is moved or recorded before it returns.
Agreed agree(const ProcessGroup& group, const Call& call, const Tensor& x);

}  // namespace mixgrad::distributed::detail
