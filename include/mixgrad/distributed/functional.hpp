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
//   op                  forward (W ranks, r = this rank)              backward (gradient dy)
//   all_reduce_sum      sum over ranks                                all_reduce_sum(dy)
//   all_reduce_max/min  elementwise max / min over ranks              all_reduce_sum(dy) where x equals
//                                                                     the result, else 0
//   all_gather          concat of every rank's x along `axis`         reduce_scatter_sum(dy, axis)
//   reduce_scatter_sum  sum over ranks, block r of W along `axis`     all_gather(dy, axis)
//   broadcast           root's x on every rank                        reduce_sum(dy) to root; 0 on the others
//   reduce_sum          root: sum over ranks; others: a token         broadcast(root's dy)
//   gather              root: concat along `axis`; others: a token    scatter(root's dy, axis)
//   scatter             block r of root's x along `axis`              gather(dy, axis) to root; 0 on the others
//   all_to_all          block j of x along split_axis goes to rank j, all_to_all with the two axes swapped
//                       the blocks received concat along concat_axis
//   remote_send/recv    x from one rank to another                    recv's dy goes back to the sender
//   copy_to_parallel_   x itself (no communication)                   all_reduce_sum(dy)
//     region (Megatron's f)
//   reduce_from_paral-  sum over ranks                                dy itself (no communication)
//     lel_region (g)
//
// The results are those of the same computation on one process holding
// every rank's tensor (a sum is summed in rank order by MPI's reduction, so
// a float sum of 3 or more ranks may round differently from another order:
// compare within float tolerance). A "token" is a scalar 0 of x's dtype on
// the ranks that get no result: call backward on it (any gradient: its
// values are not used) so that the rank takes part in the backward's
// collective.
//
// max and min: every rank whose element equals the result gets the whole
// summed gradient of that element (MegEngine's rule: ties are not split, so
// with two ranks tied each gets all of it, unlike F::max's backward over
// one tensor, which splits a tie). all_reduce_min is MPI_MIN on CPU tensors;
// on CUDA tensors it is computed as -max(-x) (~x for integers), which
// is the same bits as a minimum except that a tie of +0 and -0 may give
// either zero.
//
// Every rank calls the same op, in the same order, with the same root and
// axes and a tensor of the same shape, dtype and device type (for gather's
// and reduce_sum's tokens too: every rank passes x). Before moving data each
// op exchanges a description of its call among the ranks, so a mismatch is a
// typed exception on every rank, naming the op and each rank's dtype and
// shape, before anything moved or was recorded: ShapeError (shapes, an axis
// out of range, an extent that does not split into world_size blocks),
// DTypeError (dtypes, a sum of bool), DeviceError (devices), ValueError (a
// root out of range, ranks passing different roots or axes, an undefined
// tensor), StateError (a rank calling another op). The same holds
// in backward: every rank must backpropagate through every recorded
// collective (a rank whose result gets no gradient would leave the others
// waiting until the group's timeout, which aborts the job).
//
// Gradients: the recorded ops are twice differentiable (their backwards are
// the recorded ops above, so create_graph records them; max and min's
// masks are constants), except remote_send / remote_recv, whose gradient
// is received from another process and is not differentiable again
// (StateError if a later backward reaches it).
//
// Dtypes: every dtype moves bytewise; sum, max and min take floating and
// integer tensors, and bool takes max (or) and min (and). float16 and
// bfloat16 are reduced in float32 and rounded once, as all_reduce does.
// Under autocast the ops keep the input's dtype (they are never cast).
//
// Devices: CPU tensors go through MPI (one MPI call per op). CUDA tensors go
// through the group's NCCL collectives (all_reduce, broadcast, all_gather)
// on the current stream; reduce_scatter, reduce, gather, scatter and
// all_to_all are composed from them and move up to world_size times the data
// of a native NCCL call; remote_send / remote_recv stage CUDA tensors through
// host memory. A build without NCCL throws DeviceError for CUDA tensors.
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

/// Megatron-LM's tensor-parallel regions, a pair used together. Their
/// convention differs from all_reduce_sum's: every rank backpropagates the
/// whole loss, and a replicated tensor (the block's input, a bias after the
/// row-parallel Linear) gets its whole gradient on every rank with no
/// callback. all_reduce_sum's convention (backward sums dy) suits one block
/// with loss / W on each rank; through two stacked blocks it would sum the
/// already whole gradient of the second block's input W times.
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
