// Built when the CUDA backend is not: every CUDA request is a clear error.
#include "backend/dispatch.hpp"

namespace mixgrad {
namespace cuda_memory {
void* allocate(int64_t, int) { throw DeviceError("mixgrad was built without CUDA: cannot allocate on a cuda device"); }
void release(void*, int) {}
}  // namespace cuda_memory

namespace backend {
bool cuda_built() { return false; }
int cuda_device_count() { return 0; }
void throw_no_cuda(const char* op) {
  throw DeviceError(std::string(op) +
                    ": mixgrad was built without CUDA (reconfigure with the CUDA toolkit present, or -Dcuda=enabled)");
}
}  // namespace backend
}  // namespace mixgrad
