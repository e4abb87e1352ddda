// Collectives on CUDA tensors through NCCL, on the calling thread's current
// stream of the tensor's device. One NCCL communicator per group, made by
// the first CUDA collective: rank 0 draws NCCL's unique id and broadcasts it
// over the group's MPI communicator, then every rank joins with
// ncclCommInitRank. A process drives one GPU (the device of its first CUDA
// collective), as in NCCL's one-device-per-rank model.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <string>

#include "mixgrad/cuda.hpp"
#include "distributed/group_state.hpp"
#include "distributed/nccl.hpp"
#include "mixgrad/error.hpp"
#include "core/checks.hpp"

namespace mixgrad::distributed::detail {

namespace {

void check(ncclResult_t r, const char* fn) {
  if (r != ncclSuccess)
    throw DeviceError(std::string("distributed::") + fn + " (NCCL): " + ncclGetErrorString(r));
}

void check(cudaError_t r, const char* fn) {
  if (r != cudaSuccess) throw DeviceError(std::string("distributed::") + fn + " (CUDA): " + cudaGetErrorString(r));
}

// Sets the current CUDA device for a scope.
class DeviceScope {
 public:
  DeviceScope(int device, const char* fn) {
    check(cudaGetDevice(&previous_), fn);
    if (previous_ != device) check(cudaSetDevice(device), fn);
  }
  ~DeviceScope() { cudaSetDevice(previous_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

ncclComm_t communicator(const ProcessGroup& group, int device, const char* fn) {
  GroupState& g = *group.state();
  if (g.nccl) {
    if (g.nccl_device != device)
      throw DeviceError(std::string("distributed::") + fn + ": this process drives cuda:" +
                        std::to_string(g.nccl_device) + " in its NCCL communicator, not cuda:" +
                        std::to_string(device) + " (one GPU per rank)");
    return static_cast<ncclComm_t>(g.nccl.get());
  }
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (g.rank == 0) check(ncclGetUniqueId(&id), fn);
  MPI_Request request;
  MPI_Ibcast(&id, sizeof id, MPI_BYTE, 0, g.comm, &request);
  wait_request(g, request, "NCCL bootstrap (unique id broadcast)");
  ncclComm_t comm = nullptr;
  check(ncclCommInitRank(&comm, g.size, id, g.rank), fn);
  g.nccl = std::shared_ptr<void>(comm, [](void* c) { ncclCommDestroy(static_cast<ncclComm_t>(c)); });
  g.nccl_device = device;
  return comm;
}

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::float32: return ncclFloat32;
    case DType::float16: return ncclFloat16;
    case DType::bfloat16: return ncclBfloat16;
    case DType::float64: return ncclFloat64;
    case DType::int32: return ncclInt32;
    case DType::int64: return ncclInt64;
    case DType::bool_: return ncclUint8;
    case DType::int8: return ncclInt8;
    case DType::uint8: return ncclUint8;
  }
  return ncclUint8;
}

cudaStream_t stream_of(const Tensor& t) { return static_cast<cudaStream_t>(::mixgrad::cuda::current_stream(t.device().index())); }

}  // namespace

Work nccl_all_reduce(const ProcessGroup& group, const Tensor& tensor, ReduceOp op) {
  const int device = tensor.device().index();
  DeviceScope on(device, "all_reduce");
  ncclComm_t comm = communicator(group, device, "all_reduce");
  const ncclRedOp_t nop = op == ReduceOp::sum ? ncclSum : op == ReduceOp::max ? ncclMax : ncclAvg;
  void* data = tensor.raw_data();
  check(ncclAllReduce(data, data, static_cast<size_t>(tensor.numel()), nccl_type(tensor.dtype()), nop, comm,
                      stream_of(tensor)),
        "all_reduce");
  tensor.bump_version();
  return Work();  // ordered on the stream: later kernels there see the result
}

void nccl_broadcast(const ProcessGroup& group, const Tensor& tensor, int root) {
  const int device = tensor.device().index();
  DeviceScope on(device, "broadcast");
  ncclComm_t comm = communicator(group, device, "broadcast");
  void* data = tensor.raw_data();
  check(ncclBroadcast(data, data, static_cast<size_t>(tensor.numel()), nccl_type(tensor.dtype()), root, comm,
                      stream_of(tensor)),
        "broadcast");
  tensor.bump_version();
}

void nccl_all_gather(const ProcessGroup& group, const Tensor& tensor, const Tensor& out) {
  const int device = tensor.device().index();
  DeviceScope on(device, "all_gather");
  ncclComm_t comm = communicator(group, device, "all_gather");
  check(ncclAllGather(tensor.raw_data(), out.raw_data(), static_cast<size_t>(tensor.numel()),
                      nccl_type(tensor.dtype()), comm, stream_of(tensor)),
        "all_gather");
}

void copy_bytes(Device device, void* dst, const void* src, size_t bytes) {
  if (device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(::mixgrad::cuda::current_stream(device.index()))),
        "gradient bucket copy");
}

void zero_bytes(Device device, void* dst, size_t bytes) {
  if (device.is_cpu()) {
    std::memset(dst, 0, bytes);
    return;
  }
  check(cudaMemsetAsync(dst, 0, bytes, static_cast<cudaStream_t>(::mixgrad::cuda::current_stream(device.index()))), "gradient bucket zeroing");
}

}  // namespace mixgrad::distributed::detail
