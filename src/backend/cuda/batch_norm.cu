// CUDA batch normalization (backend/batch_norm.hpp): mixgrad's own kernels,
// one block per channel (cuda_plan::channel_plan), rather than cuDNN's, so
// every floating dtype and both statistics dtypes take one path and the
// numerics are the CPU's: the statistics in double, the variance about the
// mean just found (two passes: no E[x^2] - E[x]^2 cancellation), the
// normalisation as (x - mean) * scale + shift with scale and shift formed in
// double and rounded to the arithmetic type, and the backward's
// coefficients as backend/cpu/batch_norm.cpp forms them. The running
// statistics are updated on the device, one thread per channel.
#include <cuda_runtime_api.h>

#include "backend/batch_norm.hpp"
#include "backend/copy.hpp"
#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/check.hpp"
#include "backend/cuda/device_ptr.hpp"
#include "backend/cuda/plan.hpp"
#include "backend/cuda/row_plan.hpp"
#include "backend/cuda/stream.hpp"
#include "kernels/cast.hpp"

namespace mixgrad::backend::cuda {

namespace {

using cuda_plan::ChannelPlan;
using kernels::cast;

struct Pair {
  double a, b;
};
__device__ Pair operator+(const Pair& x, const Pair& y) { return {x.a + y.a, x.b + y.b}; }

template <class T, class S>
__global__ void __launch_bounds__(cuda_plan::kRowThreads)
    batch_norm_forward_kernel(ChannelPlan cp, const T* x, T* y, S* mean, S* var, const S* w, const S* b, double eps,
                              bool training) {
  using A = kernels::compute_t<T>;
  const int64_t count = cp.count();
  for (int64_t c = blockIdx.x; c < cp.c; c += gridDim.x) {
    if (training) {
      double s = 0;
      for (int64_t j = threadIdx.x; j < count; j += blockDim.x) s += static_cast<double>(cast<A>(x[cp.at(c, j)]));
      const double m = count > 0 ? block_all_reduce(s, SumOp{}) / static_cast<double>(count) : 0.0;
      double q = 0;
      for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
        const double d = static_cast<double>(cast<A>(x[cp.at(c, j)])) - m;
        q += d * d;
      }
      const double v = count > 0 ? block_all_reduce(q, SumOp{}) / static_cast<double>(count) : 0.0;
      if (threadIdx.x == 0) {
        mean[c] = static_cast<S>(m);
        var[c] = static_cast<S>(v);
      }
      __syncthreads();  // the stored (rounded) statistics are what the output uses
    }
    const double rstd = 1.0 / sqrt(static_cast<double>(var[c]) + eps);
    const A m = static_cast<A>(mean[c]);
    const A scale = static_cast<A>((w ? static_cast<double>(w[c]) : 1.0) * rstd);
    const A shift = static_cast<A>(b ? static_cast<double>(b[c]) : 0.0);
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      const int64_t k = cp.at(c, j);
      y[k] = cast<T>((cast<A>(x[k]) - m) * scale + shift);
    }
    __syncthreads();  // mean[c] / var[c] read before the next channel's thread 0 writes
  }
}

template <class T, class S>
__global__ void __launch_bounds__(cuda_plan::kRowThreads)
    batch_norm_backward_kernel(ChannelPlan cp, const T* x, const T* gy, T* gx, const S* mean, const S* var, const S* w,
                               S* gw, S* gb, double eps, bool training, bool need_sums) {
  using A = kernels::compute_t<T>;
  const int64_t count = cp.count();
  for (int64_t c = blockIdx.x; c < cp.c; c += gridDim.x) {
    const A m = static_cast<A>(mean[c]);
    Pair sums{0.0, 0.0};  // sum gy, sum gy * (x - mean)
    if (need_sums) {
      for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
        const int64_t k = cp.at(c, j);
        const A g = cast<A>(gy[k]);
        sums.a += static_cast<double>(g);
        sums.b += static_cast<double>(g * (cast<A>(x[k]) - m));
      }
      sums = block_all_reduce(sums, SumOp{});
    }
    const double rs = 1.0 / sqrt(static_cast<double>(var[c]) + eps);
    if (threadIdx.x == 0) {
      if (gw) gw[c] = static_cast<S>(w ? sums.b * rs : 0.0);
      if (gb) gb[c] = static_cast<S>(sums.a);
    }
    if (gx == nullptr) continue;
    const double scale = (w ? static_cast<double>(w[c]) : 1.0) * rs;
    const double n = static_cast<double>(count);
    const bool centred = training && count > 0;
    const A alpha = static_cast<A>(scale);
    const A beta = static_cast<A>(centred ? -scale * rs * rs * (sums.b / n) : 0.0);
    const A gamma = static_cast<A>(centred ? -scale * (sums.a / n) : 0.0);
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      const int64_t k = cp.at(c, j);
      gx[k] = cast<T>(alpha * cast<A>(gy[k]) + beta * (cast<A>(x[k]) - m) + gamma);
    }
  }
}

// running = (1 - momentum) * running + momentum * correction * batch, in
// double, rounded to S, stored as R (the CPU's update_running).
template <class R, class S>
__global__ void update_running_kernel(R* running, int64_t stride, const S* batch, int64_t channels, double momentum,
                                      double correction) {
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < channels;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    R& v = running[c * stride];
    const double old = static_cast<double>(cast<S>(v));
    v = cast<R>(static_cast<S>((1.0 - momentum) * old + momentum * correction * static_cast<double>(batch[c])));
  }
}

template <class F>
void visit_stats(DType x, DType stats, F&& f) {
  visit_floating(x, "batch_norm", [&]<class T>() {
    if (stats == DType::float64) f.template operator()<T, double>();
    else f.template operator()<T, float>();
  });
}

ChannelPlan plan_of(const Tensor& x) {
  const int64_t n = x.shape()[0], c = x.shape()[1];
  return cuda_plan::channel_plan(n, c, n * c == 0 ? 0 : x.numel() / (n * c));
}

template <class S>
const S* maybe(const Tensor& t) {
  return t.defined() ? device_ptr<const S>(t) : nullptr;
}
template <class S>
S* maybe_out(const Tensor& t) {
  return t.defined() ? device_ptr<S>(t) : nullptr;
}

void update_running(const Tensor& running, const Tensor& batch, double momentum, double correction,
                    cudaStream_t stream) {
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(running.numel());
  if (lc.blocks == 0) return;
  visit_stats(running.dtype(), batch.dtype(), [&]<class R, class S>() {
    update_running_kernel<R, S><<<lc.blocks, lc.threads, 0, stream>>>(device_ptr<R>(running), running.strides()[0],
                                                                       device_ptr<const S>(batch), running.numel(),
                                                                       momentum, correction);
  });
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void batch_norm_forward(const BatchNormForward& a) {
  const ChannelPlan cp = plan_of(a.x);
  if (cp.blocks == 0) return;
  DeviceGuard guard(a.y.device().index());
  const cudaStream_t stream = current_stream(a.y.device().index());
  visit_stats(a.x.dtype(), a.mean.dtype(), [&]<class T, class S>() {
    batch_norm_forward_kernel<T, S><<<cp.blocks, cuda_plan::kRowThreads, 0, stream>>>(
        cp, device_ptr<const T>(a.x), device_ptr<T>(a.y), device_ptr<S>(a.mean), device_ptr<S>(a.var),
        maybe<S>(a.weight), maybe<S>(a.bias), a.eps, a.training);
  });
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

void batch_norm_backward(const BatchNormBackward& a) {
  const ChannelPlan cp = plan_of(a.x);
  if (cp.blocks == 0) return;
  DeviceGuard guard(a.grad_y.device().index());
  const cudaStream_t stream = current_stream(a.grad_y.device().index());
  const bool need_sums = (a.training && a.grad_x.defined()) || a.grad_weight.defined() || a.grad_bias.defined();
  visit_stats(a.x.dtype(), a.mean.dtype(), [&]<class T, class S>() {
    batch_norm_backward_kernel<T, S><<<cp.blocks, cuda_plan::kRowThreads, 0, stream>>>(
        cp, device_ptr<const T>(a.x), device_ptr<const T>(a.grad_y), maybe_out<T>(a.grad_x),
        device_ptr<const S>(a.mean), device_ptr<const S>(a.var), maybe<S>(a.weight), maybe_out<S>(a.grad_weight),
        maybe_out<S>(a.grad_bias), a.eps, a.training, need_sums);
  });
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

void batch_norm_update_running(const BatchNormRunningUpdate& a) {
  DeviceGuard guard(a.running_mean.device().index());
  const cudaStream_t stream = current_stream(a.running_mean.device().index());
  update_running(a.running_mean, a.mean, a.momentum, 1.0, stream);
  update_running(a.running_var, a.var, a.momentum, a.var_correction, stream);
}

MIXGRAD_CUDA_KERNEL(batch_norm_forward, batch_norm_forward);
MIXGRAD_CUDA_KERNEL(batch_norm_backward, batch_norm_backward);
MIXGRAD_CUDA_KERNEL(batch_norm_update_running, batch_norm_update_running);

}  // namespace mixgrad::backend::cuda
