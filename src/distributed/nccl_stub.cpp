// Builds without NCCL: CUDA tensors cannot take part in collectives.
#include <cstring>
#include <string>

#include "distributed/group_state.hpp"
#include "distributed/nccl.hpp"
#include "mixgrad/error.hpp"
#include "core/checks.hpp"

namespace mixgrad::distributed::detail {

namespace {
[[noreturn]] void no_nccl(const char* fn, const Tensor& t) {
  throw DeviceError(std::string("distributed::") + fn + ": " + core::describe(t) + " on " + to_string(t.device()) +
                    " needs a mixgrad built with CUDA and NCCL; this build has no NCCL");
}
}  // namespace

Work nccl_all_reduce(const ProcessGroup&, const Tensor& tensor, ReduceOp) { no_nccl("all_reduce", tensor); }
void nccl_broadcast(const ProcessGroup&, const Tensor& tensor, int) { no_nccl("broadcast", tensor); }
void nccl_all_gather(const ProcessGroup&, const Tensor& tensor, const Tensor&) { no_nccl("all_gather", tensor); }

void copy_bytes(Device device, void* dst, const void* src, size_t bytes) {
  if (!device.is_cpu())
    throw DeviceError("distributed: gradients on " + to_string(device) + " need a build with CUDA and NCCL");
  std::memcpy(dst, src, bytes);
}

void zero_bytes(Device device, void* dst, size_t bytes) {
  if (!device.is_cpu())
    throw DeviceError("distributed: gradients on " + to_string(device) + " need a build with CUDA and NCCL");
  std::memset(dst, 0, bytes);
}

}  // namespace mixgrad::distributed::detail
