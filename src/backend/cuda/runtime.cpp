// The CUDA build's side of the device seam: what dispatch.hpp declares, the
// status check, device selection, the public mixgrad/cuda.hpp and the
// registration of the CUDA allocator. Compiled by the host compiler against
// the CUDA runtime; nothing here needs a device until a CUDA tensor exists.
#include <array>
#include <string>

#include "backend/attention.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/stream.hpp"
#include "backend/host_sync.hpp"
#include "backend/dispatch.hpp"
#include "backend/pending_checks.hpp"
#include "mixgrad/cuda.hpp"

namespace mixgrad::backend {

void throw_no_cuda(const char* op) {
  throw DeviceError(std::string(op) +
                    ": no CUDA kernel for this op yet (CPU only); move the tensors with .to(Device::cpu())");
}

namespace cuda {

namespace {
// At load time, before any tensor can exist. register_allocator writes a
// constant-initialised table, so the order of static initialisers does not
// matter.
[[maybe_unused]] const bool g_allocator_registered = (register_cuda_allocator(), true);
}  // namespace

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  cudaGetLastError();  // reset a non-sticky error so the next call starts clean
  throw DeviceError(std::string("CUDA error ") + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) +
                    ") in " + call + " at " + file + ":" + std::to_string(line));
}

int device_count() {
  // Without a driver (or a device) this fails; that means "no device", not
  // an error, so that CPU-only use of a CUDA build never notices.
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

void check_device(int device, const char* op) {
  const int n = device_count();
  if (device < 0 || device >= n) {
    throw DeviceError(std::string(op) + ": cuda:" + std::to_string(device) + " is not available (" +
                      (n == 0 ? std::string("no CUDA device or driver found") :
                                std::to_string(n) + " CUDA device(s)") + ")");
  }
}

int compute_capability(int device) {
  static const std::array<int, kMaxDevices> capability = [] {
    std::array<int, kMaxDevices> r{};
    for (int d = 0; d < device_count() && d < kMaxDevices; ++d) {
      int major = 0, minor = 0;
      if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) == cudaSuccess &&
          cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d) == cudaSuccess)
        r[d] = major * 10 + minor;
    }
    return r;
  }();
  return device >= 0 && device < kMaxDevices ? capability[device] : 0;
}

DeviceGuard::DeviceGuard(int device) {
  MIXGRAD_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) {
    MIXGRAD_CUDA_CHECK(cudaSetDevice(device));
    changed_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (changed_) cudaSetDevice(previous_);
}

}  // namespace cuda
}  // namespace mixgrad::backend

namespace mixgrad::cuda {

bool is_available() { return backend::cuda::device_count() > 0; }

bool is_built() { return true; }

void* current_stream(int device) {
  backend::cuda::check_device(device, "cuda::current_stream");
  return backend::cuda::current_stream(device);
}

int device_count() { return backend::cuda::device_count(); }

bool fused_attention_available(int device) { return backend::cuda::fused_attention_available(device); }

int64_t fused_attention_calls() { return backend::cuda::fused_attention_runs(); }

void synchronize() {
  const int n = device_count();
  if (n == 0) backend::cuda::check_device(0, "cuda::synchronize");  // throws: no device
  for (int d = 0; d < n; ++d) synchronize(d);
}

void synchronize(int device) {
  backend::cuda::check_device(device, "cuda::synchronize");
  backend::cuda::DeviceGuard guard(device);
  backend::note_host_sync("cuda::synchronize");
  MIXGRAD_CUDA_CHECK(cudaDeviceSynchronize());
  backend::run_pending_checks(device);
}

}  // namespace mixgrad::cuda
