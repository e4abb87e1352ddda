// The process group's shared state and the waiting rule every collective
// follows (private to src/distributed).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "mixgrad/device.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::distributed::detail {

struct GroupState {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
  double timeout = 300.0;  // seconds; 0: for ever
  // The NCCL communicator, made by the first CUDA collective (nccl.cpp);
  // its deleter destroys it.
  std::shared_ptr<void> nccl;
  int nccl_device = -1;

  GroupState() = default;
  GroupState(const GroupState&) = delete;
  GroupState& operator=(const GroupState&) = delete;
  ~GroupState();
};

/// Prints "mixgrad.distributed: rank R of W: message" and aborts the job.
[[noreturn]] void abort_job(const GroupState& g, const std::string& message, int code = 1);

/// Waits for `request` with the group's timeout, driving MPI's progress;
/// past the timeout the job is aborted with a message naming `what`.
void wait_request(const GroupState& g, MPI_Request& request, const char* what);

/// Bytes between host and device memory or within a device (CUDA tensors
/// on the current stream); DeviceError for CUDA without NCCL support.
void copy_bytes(Device device, void* dst, const void* src, size_t bytes);
/// Zeroes `bytes` bytes at `dst` on `device`.
void zero_bytes(Device device, void* dst, size_t bytes);

}  // namespace mixgrad::distributed::detail
