// mixgrad/distributed/functional.hpp — collectives on the tape
// (MegEngine's `megengine.distributed.functional`).
//
// Each op returns a new tensor (its input is left as it was) and is recorded
// by every recording GradManager that tracks its input, with the backward
// MegEngine gives it, so model- and pipeline-parallel code is ordinary
// autodiff:
//
//   namespace DF = mg::distributed::functional;
//   auto group = mg::distributed::init_process_group();
//   auto recording = gm.record();
//   mg::Tensor h = DF::all_gather(group, x_shard, 1);    // [B, D/W] -> [B, D]
//   mg::Tensor y = DF::all_reduce_sum(group, partial);   // row-parallel Linear
//   gm.backward(loss);                                    // runs the collectives' backwards
//
// Contract, in short (docs/distributed.md, "Recorded collectives", has each
// op's backward, the tie rule of max and min, dtypes, devices and costs):
// - Every rank calls the same op, in the same order, with the same root and
//   axes and a tensor of the same shape, dtype and device type (for
//   gather's and reduce_sum's tokens too). A mismatch is a typed exception
//   on every rank, naming the op and each rank's dtype and shape, before
//   anything moved or was recorded (ShapeError, DTypeError, DeviceError,
//   ValueError, StateError).
// - Every rank backpropagates through every recorded collective; a rank
//   that does not leaves the others waiting until the group's timeout,
//   which aborts the job. A "token" (a scalar 0 on the ranks that get no
//   result) is there to be backpropagated through.
// - Results equal the same computation on one process holding every rank's
//   tensor, to float rounding of sums over 3 or more ranks.
// - The ops are twice differentiable, except remote_send / remote_recv
//   (StateError if a later backward reaches their gradient). Under autocast
//   they keep the input's dtype. CPU tensors go through MPI, CUDA tensors
//   through NCCL; a build without NCCL throws DeviceError for CUDA tensors.
#pragma once

#include "mixgrad/device.hpp"
#include "mixgrad/distributed/process_group.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::distributed::functional {

/// The sum of x over every rank, on every rank.
Tensor all_reduce_sum(const ProcessGroup& group, const Tensor& x);
/// The elementwise maximum of x over every rank, on every rank.
Tensor all_reduce_max(const ProcessGroup& group, const Tensor& x);
/// The elementwise minimum of x over every rank, on every rank.
Tensor all_reduce_min(const ProcessGroup& group, const Tensor& x);

/// Every rank's x concatenated along `axis` in rank order (extent W * n).
Tensor all_gather(const ProcessGroup& group, const Tensor& x, int axis = 0);
/// The sum over ranks of x, of which this rank keeps block `rank` of W
/// along `axis` (whose extent W must divide).
Tensor reduce_scatter_sum(const ProcessGroup& group, const Tensor& x, int axis = 0);

/// Rank `root`'s x on every rank (the others' x give the shape).
Tensor broadcast(const ProcessGroup& group, const Tensor& x, int root = 0);
/// On `root`: the sum of x over every rank; on the others: a token.
Tensor reduce_sum(const ProcessGroup& group, const Tensor& x, int root = 0);
/// On `root`: every rank's x concatenated along `axis`; on the others: a token.
Tensor gather(const ProcessGroup& group, const Tensor& x, int root = 0, int axis = 0);
/// Block `rank` of W of root's x along `axis` (the others' x give the shape).
Tensor scatter(const ProcessGroup& group, const Tensor& x, int root = 0, int axis = 0);
/// Splits x into W blocks along `split_axis`, sends block j to rank j, and
/// concatenates the W blocks received, in rank order, along `concat_axis`.
Tensor all_to_all(const ProcessGroup& group, const Tensor& x, int split_axis = 0, int concat_axis = 0);

/// Megatron-LM's tensor-parallel regions, a pair used together: every rank
/// backpropagates the whole loss, and a replicated tensor gets its whole
/// gradient on every rank (why all_reduce_sum does not fit stacked blocks:
/// docs/distributed.md, "Megatron's regions").
///
/// "f" (copy_to_tensor_model_parallel_region): x itself in forward (nothing
/// moves, no agreement check), the sum of every rank's gradient in
/// backward. It goes where a replicated tensor enters a column-parallel
/// Linear, whose gradient each rank computes only for its own columns.
/// Every rank must backpropagate through it. ValueError for an undefined x.
Tensor copy_to_parallel_region(const ProcessGroup& group, const Tensor& x);
/// "g" (reduce_from_tensor_model_parallel_region): the sum of x over every
/// rank in forward (all_reduce_sum's data movement and checks), dy itself in
/// backward. It joins a row-parallel Linear's partial sums. ValueError for
/// an undefined x.
Tensor reduce_from_parallel_region(const ProcessGroup& group, const Tensor& x);

/// Sends x to rank `dest` (which calls remote_recv with this rank as `src`)
/// and returns a token. When x is tracked by a recording GradManager and the
/// receiver records too, backward through the token receives x's gradient
/// from `dest`. A send returns once the receiver has the tensor; two ranks
/// that send to each other must order their calls.
/// ValueError for a `dest` out of range or equal to this rank, or an
/// undefined x.
Tensor remote_send(const ProcessGroup& group, const Tensor& x, int dest);
/// The tensor rank `src` sends (its shape and dtype come with it), on
/// `device`. When the sender's x was tracked and a GradManager records
/// here, the result is recorded, and its gradient is sent back to `src`
/// during backward. ValueError for a `src` out of range or equal to this rank.
Tensor remote_recv(const ProcessGroup& group, int src, Device device = Device::cpu());

}  // namespace mixgrad::distributed::functional
