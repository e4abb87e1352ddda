// CUDA softmax / log_softmax (backend/softmax.hpp): one block per row of the
// [outer, axis, inner] view (cuda_plan::row_plan), the row's max and sum by
// block reduction, in float (double for float64) as the CPU loops.
#include <cuda_runtime_api.h>

#include "backend/copy.hpp"
#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/check.hpp"
#include "backend/cuda/device_ptr.hpp"
#include "backend/cuda/row_plan.hpp"
#include "backend/cuda/stream.hpp"
#include "backend/softmax.hpp"
#include "kernels/cast.hpp"

namespace mixgrad::backend::cuda {

namespace {

using cuda_plan::RowPlan;
using kernels::cast;

template <class T, bool kLog>
__global__ void __launch_bounds__(cuda_plan::kRowThreads) softmax_forward_kernel(RowPlan rp, const T* x, T* y) {
  using Acc = kernels::compute_t<T>;
  for (int64_t r = blockIdx.x; r < rp.rows; r += gridDim.x) {
    const int64_t base = rp.row_base(r);
    Acc m = -INFINITY;
    for (int64_t j = threadIdx.x; j < rp.length; j += blockDim.x) {
      const Acc v = cast<Acc>(x[base + j * rp.inner]);
      m = m < v ? v : m;
    }
    m = block_all_reduce(m, MaxOp{});
    if (isinf(m)) m = 0;  // an all -inf row: shift by 0, as the CPU
    Acc s = 0;
    for (int64_t j = threadIdx.x; j < rp.length; j += blockDim.x) s += exp(cast<Acc>(x[base + j * rp.inner]) - m);
    s = block_all_reduce(s, SumOp{});
    if constexpr (kLog) {
      const Acc shift = m + log(s);
      for (int64_t j = threadIdx.x; j < rp.length; j += blockDim.x) {
        const int64_t k = base + j * rp.inner;
        y[k] = cast<T>(cast<Acc>(x[k]) - shift);
      }
    } else {
      const Acc inv = Acc(1) / s;
      for (int64_t j = threadIdx.x; j < rp.length; j += blockDim.x) {
        const int64_t k = base + j * rp.inner;
        y[k] = cast<T>(exp(cast<Acc>(x[k]) - m) * inv);
      }
    }
  }
}

template <class T, bool kLog>
__global__ void __launch_bounds__(cuda_plan::kRowThreads)
    softmax_backward_kernel(RowPlan rp, const T* gy, const T* y, T* gx) {
  using Acc = kernels::compute_t<T>;
  for (int64_t r = blockIdx.x; r < rp.rows; r += gridDim.x) {
    const int64_t base = rp.row_base(r);
    Acc dot = 0;
    for (int64_t j = threadIdx.x; j < rp.length; j += blockDim.x) {
      const int64_t k = base + j * rp.inner;
      dot += kLog ? cast<Acc>(gy[k]) : cast<Acc>(gy[k]) * cast<Acc>(y[k]);
    }
    dot = block_all_reduce(dot, SumOp{});
    for (int64_t j = threadIdx.x; j < rp.length; j += blockDim.x) {
      const int64_t k = base + j * rp.inner;
      const Acc g = cast<Acc>(gy[k]), v = cast<Acc>(y[k]);
      gx[k] = cast<T>(kLog ? g - exp(v) * dot : v * (g - dot));
    }
  }
}

void check_contiguous(const char* op, const Tensor& a, const Tensor& b) {
  if (!a.is_contiguous() || !b.is_contiguous() || a.dtype() != b.dtype() || a.numel() != b.numel() ||
      a.device() != b.device())
    throw_mismatch(op, b, a);
}

}  // namespace

void softmax_forward(const Tensor& x, const Tensor& y, const SoftmaxShape& s, SoftmaxKind kind) {
  check_contiguous("softmax", x, y);
  const RowPlan rp = cuda_plan::row_plan(s.outer, s.axis, s.inner);
  if (rp.blocks == 0) return;
  DeviceGuard guard(y.device().index());
  const cudaStream_t stream = current_stream(y.device().index());
  visit_floating(y.dtype(), "softmax", [&]<class T>() {
    if (kind == SoftmaxKind::log_softmax)
      softmax_forward_kernel<T, true>
          <<<rp.blocks, cuda_plan::kRowThreads, 0, stream>>>(rp, device_ptr<const T>(x), device_ptr<T>(y));
    else
      softmax_forward_kernel<T, false>
          <<<rp.blocks, cuda_plan::kRowThreads, 0, stream>>>(rp, device_ptr<const T>(x), device_ptr<T>(y));
  });
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

void softmax_backward(const Tensor& gy, const Tensor& y, const Tensor& gx, const SoftmaxShape& s, SoftmaxKind kind) {
  check_contiguous("softmax_backward", gy, gx);
  check_contiguous("softmax_backward", y, gx);
  const RowPlan rp = cuda_plan::row_plan(s.outer, s.axis, s.inner);
  if (rp.blocks == 0) return;
  DeviceGuard guard(gx.device().index());
  const cudaStream_t stream = current_stream(gx.device().index());
  visit_floating(gx.dtype(), "softmax_backward", [&]<class T>() {
    if (kind == SoftmaxKind::log_softmax)
      softmax_backward_kernel<T, true><<<rp.blocks, cuda_plan::kRowThreads, 0, stream>>>(
          rp, device_ptr<const T>(gy), device_ptr<const T>(y), device_ptr<T>(gx));
    else
      softmax_backward_kernel<T, false><<<rp.blocks, cuda_plan::kRowThreads, 0, stream>>>(
          rp, device_ptr<const T>(gy), device_ptr<const T>(y), device_ptr<T>(gx));
  });
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

MIXGRAD_CUDA_KERNEL(softmax_forward, softmax_forward);
MIXGRAD_CUDA_KERNEL(softmax_backward, softmax_backward);

}  // namespace mixgrad::backend::cuda
