// Built when the CUDA backend is not: every CUDA request is a clear error.
// No allocator is registered for DeviceType::cuda, so a CUDA storage is a
// DeviceError from Storage itself.
#include <cstddef>

#include "backend/attention.hpp"
#include "backend/dispatch.hpp"
#include "backend/fp8.hpp"
#include "mixgrad/cuda.hpp"

namespace mixgrad {

namespace backend {
void throw_no_cuda(const char* op) {
  throw DeviceError(std::string(op) +
                    ": mixgrad was built without CUDA (reconfigure with the CUDA toolkit present, or -Dcuda=enabled)");
}
}  // namespace backend
}  // namespace mixgrad

namespace mixgrad::cuda {

namespace {
[[noreturn]] void no_device(const char* op) {
  throw DeviceError(std::string(op) + ": mixgrad was built without CUDA: there is no CUDA device");
}
}  // namespace

bool is_available() { return false; }
bool is_built() { return false; }
int device_count() { return 0; }
bool fused_attention_available(int) { return false; }
int64_t fused_attention_calls() { return 0; }
bool fp8_gemm_available(int) { return false; }
void* current_stream(int) { no_device("cuda::current_stream"); }
void synchronize() { no_device("cuda::synchronize"); }
void synchronize(int) { no_device("cuda::synchronize"); }
MemoryStats memory_stats(int) { no_device("cuda::memory_stats"); }
void reset_peak_memory_stats(int) { no_device("cuda::reset_peak_memory_stats"); }

}  // namespace mixgrad::cuda

namespace mixgrad::backend::cuda {

// The device tests link in builds without CUDA too (they exit 77 there):
// without a device no staging buffer is ever held. (Declared in
// backend/cuda/pinned.hpp, which needs the CUDA headers.)
std::size_t staging_pool_bytes(int);
std::size_t staging_pool_bytes(int) { return 0; }

// Read by the device tests: no fused attention without CUDA.
bool fused_attention_available(int) { return false; }
int64_t fused_attention_runs() { return 0; }

// Read by amp's FP8 sites (backend/fp8.hpp): no FP8 GEMM without CUDA.
bool fp8_gemm_available(int) { return false; }

}  // namespace mixgrad::backend::cuda
