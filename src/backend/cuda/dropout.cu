// CUDA dropout (backend/dropout.hpp). One thread per Philox block: the
// thread for block b draws counter mask.first + b once and applies its four
// words to elements 4b .. 4b + 3 (cuda_plan::dropout_span / dropout_keep),
// exactly the CPU's mapping, so a seed gives the same mask on both devices
// and the backward regenerates it.
#include <cuda_runtime_api.h>

#include "backend/copy.hpp"
#include "backend/cuda/check.hpp"
#include "backend/host_sync.hpp"
#include "backend/cuda/device_ptr.hpp"
#include "backend/cuda/multi_tensor_plan.hpp"
#include "backend/cuda/plan.hpp"
#include "backend/cuda/stream.hpp"
#include "backend/dropout.hpp"
#include "kernels/cast.hpp"

namespace mixgrad::backend::cuda {

namespace {

template <class T>
__global__ void dropout_kernel(const T* src, T* dst, int64_t n, kernels::DropoutMask mask, kernels::compute_t<T> scale,
                               int64_t blocks) {
  using Acc = kernels::compute_t<T>;
  const T zero = kernels::cast<T>(0.0f);
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const cuda_plan::DropoutSpan s = cuda_plan::dropout_span(b, n);
    bool keep[4];
    cuda_plan::dropout_keep(mask, b, keep);
    for (int k = 0; k < s.count; ++k) {
      const int64_t i = s.first + k;
      dst[i] = keep[k] ? kernels::cast<T>(kernels::cast<Acc>(src[i]) * scale) : zero;
    }
  }
}

}  // namespace

void dropout_apply(const Tensor& src, const Tensor& dst, const DropoutParams& p) {
  if (src.shape() != dst.shape() || src.device() != dst.device()) throw_mismatch("dropout", dst, src);
  // The mask's seed and first counter are kernel arguments drawn on the host:
  // a CUDA graph would freeze them, and every replay would drop the same units.
  check_not_capturing("dropout", "its random counters are host values that a replay would not draw again (every "
                                 "replay would apply the same mask)");
  const int device = dst.device().index();
  DeviceGuard guard(device);
  const int64_t n = dst.numel();
  const auto blocks = static_cast<int64_t>(kernels::DropoutMask::counters(n));
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(blocks);
  if (lc.blocks == 0) return;
  const cudaStream_t stream = current_stream(device);
  visit_floating(dst.dtype(), "dropout", [&]<class T>() {
    dropout_kernel<T><<<lc.blocks, lc.threads, 0, stream>>>(device_ptr<const T>(src), device_ptr<T>(dst), n, p.mask,
                                                            static_cast<kernels::compute_t<T>>(p.scale), blocks);
  });
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

MIXGRAD_CUDA_KERNEL(dropout_apply, dropout_apply);

}  // namespace mixgrad::backend::cuda
