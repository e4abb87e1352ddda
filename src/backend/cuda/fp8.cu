// CUDA side of the FP8 cast (backend/fp8.hpp): the element math of
// kernels/fp8.hpp over a strided grid-stride loop. The scale is read by the
// kernel from device memory, so a delayed-scaling step queues work and
// returns. Compiled in CUDA builds; not yet run on a GPU (docs/fp8.md).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "backend/copy.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/plan.hpp"
#include "backend/cuda/stream.hpp"
#include "backend/fp8.hpp"
#include "kernels/cast.hpp"

namespace mixgrad::backend::cuda {

namespace {

using cuda_plan::StridedIndexer;

template <class From, class To>
__global__ void fp8_quantize_kernel(StridedIndexer<2> ix, char* dst, const char* src, const float* scale,
                                    kernels::Fp8Params f, int64_t n) {
  using C = std::conditional_t<std::is_same_v<From, double> || std::is_same_v<To, double>, double, float>;
  const C k = scale == nullptr ? C(1) : static_cast<C>(*scale);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t off[2];
    ix.offsets(i, off);
    const C v = kernels::cast<C>(*reinterpret_cast<const From*>(src + off[1]));
    *reinterpret_cast<To*>(dst + off[0]) = kernels::cast<To>(kernels::fp8_round(v * k, f));
  }
}

__global__ void fp8_encode_kernel(const float* values, uint8_t* codes, kernels::Fp8Params f, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    codes[i] = kernels::fp8_encode(values[i], f);
}

__global__ void fp8_decode_kernel(const uint8_t* codes, float* values, kernels::Fp8Params f, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    values[i] = kernels::fp8_decode(codes[i], f);
}

}  // namespace

void fp8_quantize(const Tensor& src, const Tensor& dst, const Tensor& scale, const kernels::Fp8Params& format) {
  const int device = dst.device().index();
  DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(dst.numel());
  if (lc.blocks == 0) return;
  const auto ix = cuda_plan::make_indexer<2>(dst.shape(), {byte_strides(dst), byte_strides(src)});
  const float* s = scale.defined() ? static_cast<const float*>(scale.raw_data()) : nullptr;
  char* d = static_cast<char*>(dst.raw_data());
  const char* from = static_cast<const char*>(src.raw_data());
  visit_floating(src.dtype(), "fp8_quantize", [&]<class From>() {
    visit_floating(dst.dtype(), "fp8_quantize", [&]<class To>() {
      fp8_quantize_kernel<From, To><<<lc.blocks, lc.threads, 0, stream>>>(ix, d, from, s, format, dst.numel());
    });
  });
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

// Rounded in float32 by fp8_quantize, then encoded.
void fp8_encode(const Tensor& src, const Tensor& codes, const Tensor& scale, const kernels::Fp8Params& format) {
  const Tensor rounded = empty(src.shape(), DType::float32, src.device());
  fp8_quantize(src, rounded, scale, format);
  const int device = codes.device().index();
  DeviceGuard guard(device);
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(codes.numel());
  if (lc.blocks == 0) return;
  fp8_encode_kernel<<<lc.blocks, lc.threads, 0, current_stream(device)>>>(
      static_cast<const float*>(rounded.raw_data()), static_cast<uint8_t*>(codes.raw_data()), format, codes.numel());
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

void fp8_decode(const Tensor& codes, const Tensor& dst, const kernels::Fp8Params& format) {
  const Tensor values = dst.dtype() == DType::float32 ? dst : empty(dst.shape(), DType::float32, dst.device());
  const int device = dst.device().index();
  DeviceGuard guard(device);
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(codes.numel());
  if (lc.blocks == 0) return;
  fp8_decode_kernel<<<lc.blocks, lc.threads, 0, current_stream(device)>>>(
      static_cast<const uint8_t*>(codes.raw_data()), static_cast<float*>(values.raw_data()), format, codes.numel());
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
  if (values.raw_data() != dst.raw_data()) copy(values, dst);
}

MIXGRAD_CUDA_KERNEL(fp8_quantize_kernel, fp8_quantize);
MIXGRAD_CUDA_KERNEL(fp8_encode, fp8_encode);
MIXGRAD_CUDA_KERNEL(fp8_decode, fp8_decode);

}  // namespace mixgrad::backend::cuda
