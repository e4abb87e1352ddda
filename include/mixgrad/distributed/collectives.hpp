// mixgrad/distributed/collectives.hpp — all-reduce, broadcast, all-gather.
//
//   auto group = mg::distributed::init_process_group();
//   mg::Tensor g = ...;                                     // same shape and dtype on every rank
//   mg::distributed::all_reduce(group, g, mg::distributed::ReduceOp::mean);  // in place
//   mg::distributed::broadcast(group, w, 0);                 // rank 0's values everywhere
//   mg::Tensor all = mg::distributed::all_gather(group, x);  // [world_size, ...x.shape()]
//
//   auto work = mg::distributed::all_reduce_async(group, g, ReduceOp::sum);
//   ...                                                      // overlap other work
//   work.wait();                                             // g holds the sum
//
// Every rank must call the same collectives, in the same order, on tensors
// of the same shape and dtype (MPI's rule). CPU tensors go through MPI;
// CUDA tensors through NCCL on the calling thread's current CUDA stream
// (asynchronous with respect to the host, like any kernel), in builds with
// NCCL. Tensors must be contiguous (ValueError otherwise: a collective
// writes the tensor's memory in place).
//
// Dtypes. Every dtype is broadcast and gathered bytewise. all_reduce takes:
//   float32, float64: sum, mean, max, in their own precision;
//   float16, bfloat16: sum, mean, max computed in float32 and rounded once
//     (CPU: the values travel as float32; NCCL reduces natively in the
//     16-bit type). Reducing in float32 keeps a sum of many ranks from
//     rounding at every partial step, and gives every rank the same bits;
//   int32, int64: sum, max; mean throws DTypeError (no integer mean);
//   bool: max (logical or); sum and mean throw DTypeError.
// Mean divides the sum by world_size() after the reduction.
//
// Failure. A collective whose peers do not arrive within the group's timeout
// aborts the job (see process_group.hpp): a wait never hangs for ever.
#pragma once

#include <functional>
#include <memory>

#include "mixgrad/distributed/process_group.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::distributed {

enum class ReduceOp { sum, mean, max };

/// "sum", "mean" or "max"; anything else throws ValueError naming `op`.
ReduceOp parse_reduce_op(const std::string& op);

/// A started, not yet finished collective. wait() finishes it (the tensor
/// then holds the result); test() asks without blocking. Destroying an
/// unfinished Work waits for it, as the tensor's memory is still being
/// written. Move-only.
class Work {
 public:
  struct Impl;
  Work();
  explicit Work(std::unique_ptr<Impl> impl);
  Work(Work&&) noexcept;
  Work& operator=(Work&&) noexcept;
  ~Work();

  /// Blocks until done (with the group's timeout; past it the job aborts).
  /// For a CUDA tensor: enqueues the completion on the current stream and
  /// returns. Does nothing for an empty or finished Work.
  void wait();
  /// True once the collective has finished (and wait() would not block).
  bool test();
  bool pending() const { return impl_ != nullptr; }

 private:
  std::unique_ptr<Impl> impl_;
};

/// Starts reducing `tensor` in place over all ranks. See the overview for
/// the dtypes and ops taken (DTypeError otherwise, ValueError for a
/// non-contiguous tensor, DeviceError for a CUDA tensor without NCCL).
Work all_reduce_async(const ProcessGroup& group, const Tensor& tensor, ReduceOp op);
/// all_reduce_async(...).wait().
void all_reduce(const ProcessGroup& group, const Tensor& tensor, ReduceOp op);
/// Overwrites `tensor` on every rank with rank `root`'s values (ValueError
/// for a root outside [0, world_size())).
void broadcast(const ProcessGroup& group, const Tensor& tensor, int root = 0);
/// Every rank's `tensor`, stacked: shape [world_size, ...tensor.shape()], on
/// tensor's device, in rank order.
Tensor all_gather(const ProcessGroup& group, const Tensor& tensor);
/// group.barrier().
void barrier(const ProcessGroup& group);

}  // namespace mixgrad::distributed
