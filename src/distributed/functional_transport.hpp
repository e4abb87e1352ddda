// The data movement under distributed::functional, unrecorded: each call
// reads contiguous tensors and returns new ones. CPU tensors take one MPI
// call; CUDA tensors are composed from the group's NCCL collectives
// (collectives.hpp). Callers have checked the call (functional_check.hpp).
#pragma once

#include "mixgrad/distributed/process_group.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::distributed::detail {

enum class Reduction { sum, max, min };

/// x reduced over every rank, on every rank.
Tensor all_reduce_copy(const ProcessGroup& group, const Tensor& x, Reduction op);
/// Every rank's x stacked: [W, ...x.shape()].
Tensor all_gather_copy(const ProcessGroup& group, const Tensor& x);
/// blocks is [W, ...]: the sum over ranks of blocks[rank], shape blocks.shape()[1:].
Tensor reduce_scatter_copy(const ProcessGroup& group, const Tensor& blocks);
/// root's x on every rank.
Tensor broadcast_copy(const ProcessGroup& group, const Tensor& x, int root);
/// On root: the sum of x over ranks; elsewhere an undefined tensor.
Tensor reduce_copy(const ProcessGroup& group, const Tensor& x, int root);
/// On root: every rank's x stacked [W, ...]; elsewhere an undefined tensor.
Tensor gather_copy(const ProcessGroup& group, const Tensor& x, int root);
/// blocks is [W, ...] (its values are read on root only): root's blocks[rank].
Tensor scatter_copy(const ProcessGroup& group, const Tensor& blocks, int root);
/// blocks is [W, ...]: out[j] = rank j's blocks[rank].
Tensor all_to_all_copy(const ProcessGroup& group, const Tensor& blocks);

/// Point-to-point messages of remote_send / remote_recv, with the group's
/// timeout. Tags keep a pair's descriptions, data, replies and gradients
/// apart.
enum class Tag : int { description = 0x6d67, data, reply, gradient };
void send_bytes(const ProcessGroup& group, const void* data, size_t bytes, int dest, Tag tag, const char* what);
void recv_bytes(const ProcessGroup& group, void* data, size_t bytes, int src, Tag tag, const char* what);
/// A tensor's bytes (any device; CUDA through host memory).
void send_tensor(const ProcessGroup& group, const Tensor& x, int dest, Tag tag, const char* what);
/// Receives into a new tensor of this shape and dtype on `device`.
Tensor recv_tensor(const ProcessGroup& group, const Shape& shape, DType dtype, Device device, int src, Tag tag,
                   const char* what);

}  // namespace mixgrad::distributed::detail
