// CUDA normalization (backend/normalization.hpp): the layer-norm kernels,
// which group and instance norm run too (ops/normalization.cpp). One block
// per row: the mean, then the variance about it (two passes, as the CPU: no
// E[x^2] - E[x]^2 cancellation), by block reduction in float (double for
// float64). The backward's dx is a row kernel too; the weight and bias
// gradients are column sums, one thread per column adding the rows in
// order, so they are deterministic.
#include <cuda_runtime_api.h>

#include "backend/copy.hpp"
#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/check.hpp"
#include "backend/cuda/device_ptr.hpp"
#include "backend/cuda/plan.hpp"
#include "backend/cuda/row_plan.hpp"
#include "backend/cuda/stream.hpp"
#include "backend/normalization.hpp"
#include "kernels/cast.hpp"
#include "kernels/normalization.hpp"

namespace mixgrad::backend::cuda {

namespace {

using cuda_plan::RowPlan;
using kernels::cast;

template <class T>
__global__ void __launch_bounds__(cuda_plan::kRowThreads)
    layer_norm_forward_kernel(RowPlan rp, const T* x, const kernels::compute_t<T>* w, const kernels::compute_t<T>* b,
                              kernels::compute_t<T> eps, T* y, kernels::compute_t<T>* mean_out,
                              kernels::compute_t<T>* rstd_out) {
  using Acc = kernels::compute_t<T>;
  const Acc inv_cols = Acc(1) / static_cast<Acc>(rp.length);
  for (int64_t r = blockIdx.x; r < rp.rows; r += gridDim.x) {
    const T* xr = x + r * rp.length;
    Acc s = 0;
    for (int64_t j = threadIdx.x; j < rp.length; j += blockDim.x) s += cast<Acc>(xr[j]);
    const Acc mean = block_all_reduce(s, SumOp{}) * inv_cols;
    Acc q = 0;
    for (int64_t j = threadIdx.x; j < rp.length; j += blockDim.x) {
      const Acc d = cast<Acc>(xr[j]) - mean;
      q += d * d;
    }
    const Acc var = block_all_reduce(q, SumOp{}) * inv_cols;
    const Acc rstd = Acc(1) / sqrt(var + eps);
    if (threadIdx.x == 0) {
      mean_out[r] = mean;
      rstd_out[r] = rstd;
    }
    T* yr = y + r * rp.length;
    for (int64_t j = threadIdx.x; j < rp.length; j += blockDim.x)
      yr[j] = cast<T>(kernels::layer_norm_value(cast<Acc>(xr[j]), mean, rstd, w ? w[j] : Acc(1), b ? b[j] : Acc(0)));
  }
}

template <class T>
__global__ void __launch_bounds__(cuda_plan::kRowThreads)
    layer_norm_dx_kernel(RowPlan rp, const T* x, const T* g, const kernels::compute_t<T>* w,
                         const kernels::compute_t<T>* mean, const kernels::compute_t<T>* rstd, T* gx) {
  using Acc = kernels::compute_t<T>;
  const Acc inv_cols = Acc(1) / static_cast<Acc>(rp.length);
  for (int64_t r = blockIdx.x; r < rp.rows; r += gridDim.x) {
    const T* xr = x + r * rp.length;
    const T* gr = g + r * rp.length;
    const Acc m = mean[r], rs = rstd[r];
    Acc s_dy = 0, s_dy_xhat = 0;
    for (int64_t j = threadIdx.x; j < rp.length; j += blockDim.x) {
      const Acc dy = cast<Acc>(gr[j]) * (w ? w[j] : Acc(1));
      s_dy += dy;
      s_dy_xhat += dy * ((cast<Acc>(xr[j]) - m) * rs);
    }
    const Acc mean_dy = block_all_reduce(s_dy, SumOp{}) * inv_cols;
    const Acc mean_dy_xhat = block_all_reduce(s_dy_xhat, SumOp{}) * inv_cols;
    T* gxr = gx + r * rp.length;
    for (int64_t j = threadIdx.x; j < rp.length; j += blockDim.x)
      gxr[j] = cast<T>(kernels::layer_norm_grad_x(cast<Acc>(gr[j]) * (w ? w[j] : Acc(1)), (cast<Acc>(xr[j]) - m) * rs,
                                                  rs, mean_dy, mean_dy_xhat));
  }
}

// One thread per column: the rows in order (coalesced across the threads).
template <class T>
__global__ void layer_norm_dwb_kernel(int64_t rows, int64_t cols, const T* x, const T* g,
                                      const kernels::compute_t<T>* mean, const kernels::compute_t<T>* rstd,
                                      kernels::compute_t<T>* gw, kernels::compute_t<T>* gb) {
  using Acc = kernels::compute_t<T>;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < cols;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Acc sw = 0, sb = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const Acc gv = cast<Acc>(g[r * cols + j]);
      sw += gv * ((cast<Acc>(x[r * cols + j]) - mean[r]) * rstd[r]);
      sb += gv;
    }
    if (gw) gw[j] = sw;
    if (gb) gb[j] = sb;
  }
}

template <class Acc>
const Acc* maybe(const Tensor& t) {
  return t.defined() ? device_ptr<const Acc>(t) : nullptr;
}
template <class Acc>
Acc* maybe_out(const Tensor& t) {
  return t.defined() ? device_ptr<Acc>(t) : nullptr;
}

}  // namespace

void layer_norm_forward(const LayerNormArgs& a, const LayerNormOutputs& o) {
  const RowPlan rp = cuda_plan::row_plan(a.rows, a.cols, 1);
  if (rp.blocks == 0) return;
  DeviceGuard guard(a.x.device().index());
  const cudaStream_t stream = current_stream(a.x.device().index());
  visit_floating(a.x.dtype(), "layer_norm", [&]<class T>() {
    using Acc = kernels::compute_t<T>;
    layer_norm_forward_kernel<T><<<rp.blocks, cuda_plan::kRowThreads, 0, stream>>>(
        rp, device_ptr<const T>(a.x), maybe<Acc>(a.weight), maybe<Acc>(a.bias), static_cast<Acc>(a.eps),
        device_ptr<T>(o.out), device_ptr<Acc>(o.mean), device_ptr<Acc>(o.rstd));
  });
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

void layer_norm_backward(const LayerNormArgs& a, const LayerNormOutputs& saved, const Tensor& grad_out,
                         const LayerNormGrads& grads) {
  const RowPlan rp = cuda_plan::row_plan(a.rows, a.cols, 1);
  if (rp.blocks == 0) {
    // No rows: the weight and bias gradients are sums of nothing.
    if (grads.weight.defined()) fill(grads.weight, 0.0);
    if (grads.bias.defined()) fill(grads.bias, 0.0);
    return;
  }
  DeviceGuard guard(a.x.device().index());
  const cudaStream_t stream = current_stream(a.x.device().index());
  visit_floating(a.x.dtype(), "layer_norm", [&]<class T>() {
    using Acc = kernels::compute_t<T>;
    if (grads.x.defined()) {
      layer_norm_dx_kernel<T><<<rp.blocks, cuda_plan::kRowThreads, 0, stream>>>(
          rp, device_ptr<const T>(a.x), device_ptr<const T>(grad_out), maybe<Acc>(a.weight),
          device_ptr<const Acc>(saved.mean), device_ptr<const Acc>(saved.rstd), device_ptr<T>(grads.x));
      MIXGRAD_CUDA_CHECK(cudaGetLastError());
    }
    if (grads.weight.defined() || grads.bias.defined()) {
      const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(a.cols);
      layer_norm_dwb_kernel<T><<<lc.blocks, lc.threads, 0, stream>>>(
          a.rows, a.cols, device_ptr<const T>(a.x), device_ptr<const T>(grad_out), device_ptr<const Acc>(saved.mean),
          device_ptr<const Acc>(saved.rstd), maybe_out<Acc>(grads.weight), maybe_out<Acc>(grads.bias));
      MIXGRAD_CUDA_CHECK(cudaGetLastError());
    }
  });
}

MIXGRAD_CUDA_KERNEL(layer_norm_forward, layer_norm_forward);
MIXGRAD_CUDA_KERNEL(layer_norm_backward, layer_norm_backward);

}  // namespace mixgrad::backend::cuda
