// The CUDA half of the collectives: NCCL on the current CUDA stream, its
// communicator bootstrapped by broadcasting NCCL's unique id over MPI.
// Builds without NCCL get nccl_stub.cpp, whose functions throw DeviceError.
#pragma once

#include "mixgrad/distributed/collectives.hpp"

namespace mixgrad::distributed::detail {

Work nccl_all_reduce(const ProcessGroup& group, const Tensor& tensor, ReduceOp op);
void nccl_broadcast(const ProcessGroup& group, const Tensor& tensor, int root);
void nccl_all_gather(const ProcessGroup& group, const Tensor& tensor, const Tensor& out);

}  // namespace mixgrad::distributed::detail
