// CUDA side of dynamic loss scaling (backend/loss_scale.hpp): the scaled
// upstream gradient and the scale update. The scale, its inverse, the growth
// tracker and the found-inf flag stay in device memory and are read by the
// kernels, so GradScaler::backward and update() queue work and return.
#include <cuda_runtime_api.h>

#include "backend/copy.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/plan.hpp"
#include "backend/cuda/stream.hpp"
#include "backend/loss_scale.hpp"
#include "kernels/grad_scaling.hpp"

namespace mixgrad::backend::cuda {

namespace {

using cuda_plan::StridedIndexer;

__device__ double scalar_at(const void* p, bool is64) {
  return is64 ? *static_cast<const double*>(p) : static_cast<double>(*static_cast<const float*>(p));
}

// dst = src * scale with the scale rounded once to dst's arithmetic type;
// without a source (src == nullptr), dst = the scale rounded to To.
template <class From, class To>
__global__ void scale_copy_kernel(StridedIndexer<2> ix, char* dst, const char* src, const void* scale, bool is64,
                                  int64_t n) {
  const double factor = scalar_at(scale, is64);
  const kernels::ScaleCopy<From, To> op{kernels::applied_factor<To>(factor)};
  const To filled = kernels::cast<To>(factor);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t off[2];
    ix.offsets(i, off);
    *reinterpret_cast<To*>(dst + off[0]) = src == nullptr ? filled : op(*reinterpret_cast<const From*>(src + off[1]));
  }
}

__global__ void update_scale_kernel(double* scale, double* inv_scale, int64_t* tracker, const float* found_inf,
                                    kernels::ScaleUpdate rule) {
  rule(*scale, *inv_scale, *tracker, found_inf != nullptr && *found_inf != 0.0f);
}

}  // namespace

void scale_copy(const Tensor& src, const Tensor& dst, const Tensor& scale) {
  if (src.defined() && (src.shape() != dst.shape() || src.device() != dst.device()))
    throw_mismatch("scale_copy", dst, src);
  const int device = dst.device().index();
  DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(dst.numel());
  if (lc.blocks == 0) return;
  const Tensor& s = src.defined() ? src : dst;  // no source: its strides are never used
  const auto ix = cuda_plan::make_indexer<2>(dst.shape(), {byte_strides(dst), byte_strides(s)});
  const bool is64 = scale.dtype() == DType::float64;
  char* d = static_cast<char*>(dst.raw_data());
  const char* from = src.defined() ? static_cast<const char*>(src.raw_data()) : nullptr;
  visit_dtype(s.dtype(), [&]<class From>() {
    visit_floating(dst.dtype(), "scale_copy", [&]<class To>() {
      scale_copy_kernel<From, To>
          <<<lc.blocks, lc.threads, 0, stream>>>(ix, d, from, scale.raw_data(), is64, dst.numel());
    });
  });
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

void update_scale(const Tensor& scale, const Tensor& inv_scale, const Tensor& growth_tracker, const Tensor& found_inf,
                  const ScaleUpdateOptions& o) {
  const int device = scale.device().index();
  DeviceGuard guard(device);
  const kernels::ScaleUpdate rule{o.growth_factor, o.backoff_factor, o.min_scale, o.max_scale, o.growth_interval};
  update_scale_kernel<<<1, 1, 0, current_stream(device)>>>(
      static_cast<double*>(scale.raw_data()), static_cast<double*>(inv_scale.raw_data()),
      static_cast<int64_t*>(growth_tracker.raw_data()),
      found_inf.defined() ? static_cast<const float*>(found_inf.raw_data()) : nullptr, rule);
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

MIXGRAD_CUDA_KERNEL(scale_copy_kernel, scale_copy);
MIXGRAD_CUDA_KERNEL(update_scale, update_scale);

}  // namespace mixgrad::backend::cuda
