// CUDA padding and 2-d resampling (backend/resize.hpp). Each thread maps its
// output element to its source(s) through the plans of cuda/resize_plan.hpp
// (the CPU's formulas, host-tested). The forwards write each output once.
// The backwards scatter with atomicAdd into an accumulator (gx itself in
// float32 / float64, a float scratch rounded once into gx in the 16-bit
// dtypes, as the CPU's per-plane float accumulator): the order of additions
// into one input element varies between runs, so float results may differ
// from the CPU's in the last bits.
#include <cuda_runtime_api.h>

#include "backend/cuda/launch.cuh"
#include "backend/cuda/check.hpp"
#include "backend/cuda/device_ptr.hpp"
#include "backend/cuda/plan.hpp"
#include "backend/cuda/resize_plan.hpp"
#include "backend/cuda/stream.hpp"
#include "backend/resize.hpp"
#include "kernels/cast.hpp"

namespace mixgrad::backend::cuda {

namespace {

using cuda_plan::AxisTaps;
using cuda_plan::PadPlan;
using kernels::cast;
using kernels::compute_t;

template <class T>
__global__ void pad_forward_kernel(const T* x, PadPlan pp, T fill, T* y, int64_t n) {
  MIXGRAD_GRID_STRIDE_LOOP(p, n) {
    const int64_t s = pp.source(p);
    y[p] = s < 0 ? fill : x[s];
  }
}

template <class T, class Acc>
__global__ void pad_backward_kernel(const T* gy, PadPlan pp, Acc* acc, int64_t n) {
  MIXGRAD_GRID_STRIDE_LOOP(p, n) {
    const int64_t s = pp.source(p);
    if (s >= 0) atomicAdd(acc + s, cast<Acc>(gy[p]));
  }
}

template <class T, class Acc>
__global__ void round_kernel(const Acc* acc, T* out, int64_t n) {
  MIXGRAD_GRID_STRIDE_LOOP(p, n) out[p] = cast<T>(acc[p]);
}

struct Upsample {
  int64_t h, w, oh, ow;
  UpsampleParams p;
};

template <class T>
__global__ void upsample_forward_kernel(const T* x, Upsample u, T* y, int64_t n) {
  using Acc = compute_t<T>;
  MIXGRAD_GRID_STRIDE_LOOP(q, n) {
    const int64_t ow = q % u.ow, oh = (q / u.ow) % u.oh, c = q / (u.ow * u.oh);
    const AxisTaps<Acc> th = cuda_plan::axis_taps<Acc>(oh, u.h, u.oh, u.p.bilinear, u.p.align_corners, u.p.scale_h);
    const AxisTaps<Acc> tw = cuda_plan::axis_taps<Acc>(ow, u.w, u.ow, u.p.bilinear, u.p.align_corners, u.p.scale_w);
    const T* in = x + c * u.h * u.w;
    if (!u.p.bilinear) {
      y[q] = in[th.i0 * u.w + tw.i0];
      continue;
    }
    const T* r0 = in + th.i0 * u.w;
    const T* r1 = in + th.i1 * u.w;
    const Acc v = th.w0 * (tw.w0 * cast<Acc>(r0[tw.i0]) + tw.w1 * cast<Acc>(r0[tw.i1])) +
                  th.w1 * (tw.w0 * cast<Acc>(r1[tw.i0]) + tw.w1 * cast<Acc>(r1[tw.i1]));
    y[q] = cast<T>(v);
  }
}

template <class T, class Acc>
__global__ void upsample_backward_kernel(const T* gy, Upsample u, Acc* acc, int64_t n) {
  MIXGRAD_GRID_STRIDE_LOOP(q, n) {
    const int64_t ow = q % u.ow, oh = (q / u.ow) % u.oh, c = q / (u.ow * u.oh);
    const AxisTaps<Acc> th = cuda_plan::axis_taps<Acc>(oh, u.h, u.oh, u.p.bilinear, u.p.align_corners, u.p.scale_h);
    const AxisTaps<Acc> tw = cuda_plan::axis_taps<Acc>(ow, u.w, u.ow, u.p.bilinear, u.p.align_corners, u.p.scale_w);
    Acc* a = acc + c * u.h * u.w;
    const Acc v = cast<Acc>(gy[q]);
    if (!u.p.bilinear) {
      atomicAdd(a + th.i0 * u.w + tw.i0, v);
      continue;
    }
    atomicAdd(a + th.i0 * u.w + tw.i0, th.w0 * tw.w0 * v);
    atomicAdd(a + th.i0 * u.w + tw.i1, th.w0 * tw.w1 * v);
    atomicAdd(a + th.i1 * u.w + tw.i0, th.w1 * tw.w0 * v);
    atomicAdd(a + th.i1 * u.w + tw.i1, th.w1 * tw.w1 * v);
  }
}

/// Zeroes an accumulator for gx (gx itself when T is its own accumulator
/// type), runs `scatter(acc)`, and rounds the scratch into gx.
template <class T, class Scatter>
void accumulate_into(const Tensor& gx, cudaStream_t stream, Scatter&& scatter) {
  using Acc = compute_t<T>;
  const int64_t n = gx.numel();
  if constexpr (std::is_same_v<Acc, T>) {
    MIXGRAD_CUDA_CHECK(cudaMemsetAsync(gx.raw_data(), 0, static_cast<size_t>(n) * sizeof(T), stream));
    scatter(device_ptr<T>(gx));
  } else {
    const Tensor acc = empty(gx.shape(), DType::float32, gx.device());
    MIXGRAD_CUDA_CHECK(cudaMemsetAsync(acc.raw_data(), 0, static_cast<size_t>(n) * sizeof(Acc), stream));
    scatter(device_ptr<Acc>(acc));
    const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(n);
    round_kernel<T, Acc><<<lc.blocks, lc.threads, 0, stream>>>(device_ptr<const Acc>(acc), device_ptr<T>(gx), n);
  }
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

Upsample upsample_of(const Tensor& small, const Tensor& large, const UpsampleParams& p) {
  return {small.shape()[2], small.shape()[3], large.shape()[2], large.shape()[3], p};
}

}  // namespace

void pad_forward(const Tensor& x, const Tensor& y, const PadParams& p) {
  const int64_t n = y.numel();
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(n);
  if (lc.blocks == 0) return;
  LaunchOn on(y);
  const PadPlan pp = cuda_plan::pad_plan(x.shape(), y.shape(), p);
  visit_floating(y.dtype(), "pad", [&]<class T>() {
    pad_forward_kernel<T><<<lc.blocks, lc.threads, 0, on.stream>>>(device_ptr<const T>(x), pp, cast<T>(p.value),
                                                                    device_ptr<T>(y), n);
  });
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

void pad_backward(const Tensor& gy, const Tensor& gx, const PadParams& p) {
  if (gx.numel() == 0) return;
  LaunchOn on(gx);
  const PadPlan pp = cuda_plan::pad_plan(gx.shape(), gy.shape(), p);
  const int64_t n = gy.numel();
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(n);
  visit_floating(gx.dtype(), "pad", [&]<class T>() {
    accumulate_into<T>(gx, on.stream, [&](compute_t<T>* acc) {
      if (lc.blocks == 0) return;
      pad_backward_kernel<T, compute_t<T>><<<lc.blocks, lc.threads, 0, on.stream>>>(device_ptr<const T>(gy), pp, acc, n);
    });
  });
}

void upsample2d_forward(const Tensor& x, const Tensor& y, const UpsampleParams& p) {
  const int64_t n = y.numel();
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(n);
  if (lc.blocks == 0) return;
  LaunchOn on(y);
  const Upsample u = upsample_of(x, y, p);
  visit_floating(y.dtype(), "interpolate", [&]<class T>() {
    upsample_forward_kernel<T><<<lc.blocks, lc.threads, 0, on.stream>>>(device_ptr<const T>(x), u, device_ptr<T>(y), n);
  });
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

void upsample2d_backward(const Tensor& gy, const Tensor& gx, const UpsampleParams& p) {
  if (gx.numel() == 0) return;
  LaunchOn on(gx);
  const Upsample u = upsample_of(gx, gy, p);
  const int64_t n = gy.numel();
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(n);
  visit_floating(gx.dtype(), "interpolate", [&]<class T>() {
    accumulate_into<T>(gx, on.stream, [&](compute_t<T>* acc) {
      if (lc.blocks == 0) return;
      upsample_backward_kernel<T, compute_t<T>><<<lc.blocks, lc.threads, 0, on.stream>>>(device_ptr<const T>(gy), u,
                                                                                       acc, n);
    });
  });
}

MIXGRAD_CUDA_KERNEL(pad_forward, pad_forward);
MIXGRAD_CUDA_KERNEL(pad_backward, pad_backward);
MIXGRAD_CUDA_KERNEL(upsample2d_forward, upsample2d_forward);
MIXGRAD_CUDA_KERNEL(upsample2d_backward, upsample2d_backward);

}  // namespace mixgrad::backend::cuda
