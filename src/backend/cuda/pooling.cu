// CUDA 2-d pooling (backend/pooling.hpp): mixgrad's own grid-stride kernels,
// not cuDNN's pooling. Max pooling must hand its backward the
// MaxPoolWorkspace the CPU defines (Kind::argmax: the int32 offset of each
// maximum within its input plane, -1 for a window wholly in the padding),
// which cuDNN does not expose (its backward re-reads x and y instead); own
// kernels also give the CPU's exact rules (NaN wins, padded positions never
// do, averages count only the inside positions) in every floating dtype.
//
// Forward: one thread per output walks its window (cuda_plan::fixed_window /
// adaptive_window). Backward: one thread per input gathers from the outputs
// whose window holds it (cuda_plan::fixed_outputs_of / adaptive_outputs_of),
// so there are no atomics and the sum order is fixed (deterministic). Math
// in kernels::compute_t<T> (float for the 16-bit types), as the CPU.
#include <cuda_runtime_api.h>

#include "backend/copy.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/conv_plan.hpp"
#include "backend/cuda/device_ptr.hpp"
#include "backend/cuda/plan.hpp"
#include "backend/cuda/stream.hpp"
#include "backend/pooling.hpp"
#include "kernels/cast.hpp"

namespace mixgrad::backend::cuda {

namespace {

using kernels::cast;
namespace cp = cuda_plan;

struct Geometry {
  int64_t planes, h, w, oh, ow;
  int64_t kh, kw, sh, sw, ph, pw;  // fixed windows only
};

Geometry geometry(const Tensor& x, const Tensor& y, const Pool2dParams& p) {
  return {x.shape()[0] * x.shape()[1], x.shape()[2], x.shape()[3], y.shape()[2], y.shape()[3],
          p.kernel.h,                  p.kernel.w,   p.stride.h,   p.stride.w,   p.padding.h, p.padding.w};
}

struct Fixed {
  __device__ static void window(const Geometry& g, int64_t oh, int64_t ow, int64_t& h0, int64_t& h1, int64_t& w0,
                                int64_t& w1) {
    cp::fixed_window(oh, g.kh, g.sh, g.ph, g.h, h0, h1);
    cp::fixed_window(ow, g.kw, g.sw, g.pw, g.w, w0, w1);
  }
  __device__ static void outputs(const Geometry& g, int64_t ih, int64_t iw, int64_t& o0, int64_t& o1, int64_t& p0,
                                 int64_t& p1) {
    cp::fixed_outputs_of(ih, g.kh, g.sh, g.ph, g.oh, o0, o1);
    cp::fixed_outputs_of(iw, g.kw, g.sw, g.pw, g.ow, p0, p1);
  }
};

struct Adaptive {
  __device__ static void window(const Geometry& g, int64_t oh, int64_t ow, int64_t& h0, int64_t& h1, int64_t& w0,
                                int64_t& w1) {
    cp::adaptive_window(oh, g.h, g.oh, h0, h1);
    cp::adaptive_window(ow, g.w, g.ow, w0, w1);
  }
  __device__ static void outputs(const Geometry& g, int64_t ih, int64_t iw, int64_t& o0, int64_t& o1, int64_t& p0,
                                 int64_t& p1) {
    cp::adaptive_outputs_of(ih, g.h, g.oh, o0, o1);
    cp::adaptive_outputs_of(iw, g.w, g.ow, p0, p1);
  }
};

template <class T>
__global__ void max_forward_kernel(Geometry g, const T* x, T* y, int32_t* argmax) {
  using A = kernels::compute_t<T>;
  const int64_t n = g.planes * g.oh * g.ow;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < n;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ow = o % g.ow, oh = (o / g.ow) % g.oh, c = o / (g.ow * g.oh);
    int64_t h0, h1, w0, w1;
    Fixed::window(g, oh, ow, h0, h1, w0, w1);
    const T* in = x + c * g.h * g.w;
    int64_t best_at = -1;
    A best = -INFINITY;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) {
        const A v = cast<A>(in[ih * g.w + iw]);
        if (best_at < 0 || v > best || (isnan(v) && !isnan(best))) {  // NaN wins, as in max
          best = v;
          best_at = ih * g.w + iw;
        }
      }
    y[o] = best_at < 0 ? cast<T>(best) : in[best_at];
    argmax[o] = static_cast<int32_t>(best_at);
  }
}

template <class T>
__global__ void max_backward_kernel(Geometry g, const T* gy, const int32_t* argmax, T* gx) {
  using A = kernels::compute_t<T>;
  const int64_t n = g.planes * g.h * g.w;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t iw = i % g.w, ih = (i / g.w) % g.h, c = i / (g.w * g.h);
    const int32_t at = static_cast<int32_t>(ih * g.w + iw);
    int64_t o0, o1, p0, p1;
    Fixed::outputs(g, ih, iw, o0, o1, p0, p1);
    A acc = 0;
    for (int64_t oh = o0; oh < o1; ++oh)
      for (int64_t ow = p0; ow < p1; ++ow) {
        const int64_t o = (c * g.oh + oh) * g.ow + ow;
        if (argmax[o] == at) acc += cast<A>(gy[o]);
      }
    gx[i] = cast<T>(acc);
  }
}

template <class T, class W>
__global__ void avg_forward_kernel(Geometry g, const T* x, T* y) {
  using A = kernels::compute_t<T>;
  const int64_t n = g.planes * g.oh * g.ow;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < n;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ow = o % g.ow, oh = (o / g.ow) % g.oh, c = o / (g.ow * g.oh);
    int64_t h0, h1, w0, w1;
    W::window(g, oh, ow, h0, h1, w0, w1);
    const T* in = x + c * g.h * g.w;
    A s = 0;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) s += cast<A>(in[ih * g.w + iw]);
    const int64_t count = (h1 - h0) * (w1 - w0);
    y[o] = cast<T>(count > 0 ? s / static_cast<A>(count) : A(0));
  }
}

template <class T, class W>
__global__ void avg_backward_kernel(Geometry g, const T* gy, T* gx) {
  using A = kernels::compute_t<T>;
  const int64_t n = g.planes * g.h * g.w;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t iw = i % g.w, ih = (i / g.w) % g.h, c = i / (g.w * g.h);
    int64_t o0, o1, p0, p1;
    W::outputs(g, ih, iw, o0, o1, p0, p1);
    A acc = 0;
    for (int64_t oh = o0; oh < o1; ++oh)
      for (int64_t ow = p0; ow < p1; ++ow) {
        int64_t h0, h1, w0, w1;
        W::window(g, oh, ow, h0, h1, w0, w1);
        const int64_t count = (h1 - h0) * (w1 - w0);
        if (count > 0) acc += cast<A>(gy[(c * g.oh + oh) * g.ow + ow]) / static_cast<A>(count);
      }
    gx[i] = cast<T>(acc);
  }
}

void check_pair(const char* op, const Tensor& in, const Tensor& out) {
  if (in.device() != out.device())
    throw DeviceError(std::string(op) + ": input on " + to_string(in.device()) + ", output on " +
                      to_string(out.device()) + "; move it with Tensor::to(Device) first");
  if (in.dtype() != out.dtype())
    throw DTypeError(std::string(op) + ": input " + std::string(to_string(in.dtype())) + to_string(in.shape()) +
                     " and output " + std::string(to_string(out.dtype())) + to_string(out.shape()) + " differ");
  if (in.ndim() != 4 || out.ndim() != 4 || !in.is_contiguous() || !out.is_contiguous())
    throw ShapeError(std::string(op) + ": expected contiguous [N, C, H, W] operands, got " + to_string(in.shape()) +
                     " and " + to_string(out.shape()));
}

// Launches `kernel` over n threads on out's device and current stream.
template <class Launch>
void launch(const Tensor& out, int64_t n, Launch&& l) {
  const cp::LaunchConfig lc = cp::launch_config(n);
  if (lc.blocks == 0) return;
  const int device = out.device().index();
  DeviceGuard guard(device);
  l(lc, current_stream(device));
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

MaxPoolWorkspace max_pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dParams& p) {
  check_pair("max_pool2d", x, y);
  MaxPoolWorkspace ws;
  ws.kind = MaxPoolWorkspace::Kind::argmax;
  ws.compute_dtype = y.dtype();
  ws.data = empty(y.shape(), DType::int32, y.device());
  const Geometry g = geometry(x, y, p);
  visit_floating(y.dtype(), "max_pool2d", [&]<class T>() {
    launch(y, y.numel(), [&](const cp::LaunchConfig& lc, cudaStream_t s) {
      max_forward_kernel<T><<<lc.blocks, lc.threads, 0, s>>>(g, device_ptr<const T>(x), device_ptr<T>(y),
                                                             device_ptr<int32_t>(ws.data));
    });
  });
  return ws;
}

void max_pool2d_backward(const Tensor& gy, const MaxPoolWorkspace& ws, const Tensor& gx, const Pool2dParams& p) {
  check_pair("max_pool2d", gx, gy);
  if (ws.kind != MaxPoolWorkspace::Kind::argmax || !ws.data.defined() || ws.data.device() != gy.device() ||
      ws.data.shape() != gy.shape())
    throw StateError("max_pool2d: the backward on " + to_string(gx.device()) + " needs the argmax workspace of a "
                     "forward on that device for output " + to_string(gy.shape()));
  const Geometry g = geometry(gx, gy, p);
  visit_floating(gx.dtype(), "max_pool2d", [&]<class T>() {
    launch(gx, gx.numel(), [&](const cp::LaunchConfig& lc, cudaStream_t s) {
      max_backward_kernel<T><<<lc.blocks, lc.threads, 0, s>>>(g, device_ptr<const T>(gy),
                                                              device_ptr<const int32_t>(ws.data), device_ptr<T>(gx));
    });
  });
}

void avg_pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dParams& p) {
  check_pair("avg_pool2d", x, y);
  const Geometry g = geometry(x, y, p);
  visit_floating(y.dtype(), "avg_pool2d", [&]<class T>() {
    launch(y, y.numel(), [&](const cp::LaunchConfig& lc, cudaStream_t s) {
      avg_forward_kernel<T, Fixed><<<lc.blocks, lc.threads, 0, s>>>(g, device_ptr<const T>(x), device_ptr<T>(y));
    });
  });
}

void avg_pool2d_backward(const Tensor& gy, const Tensor& gx, const Pool2dParams& p) {
  check_pair("avg_pool2d", gx, gy);
  const Geometry g = geometry(gx, gy, p);
  visit_floating(gx.dtype(), "avg_pool2d", [&]<class T>() {
    launch(gx, gx.numel(), [&](const cp::LaunchConfig& lc, cudaStream_t s) {
      avg_backward_kernel<T, Fixed><<<lc.blocks, lc.threads, 0, s>>>(g, device_ptr<const T>(gy), device_ptr<T>(gx));
    });
  });
}

void adaptive_avg_pool2d_forward(const Tensor& x, const Tensor& y) {
  check_pair("adaptive_avg_pool2d", x, y);
  if (y.numel() == 0) return;
  const Geometry g = geometry(x, y, Pool2dParams{});
  visit_floating(y.dtype(), "adaptive_avg_pool2d", [&]<class T>() {
    launch(y, y.numel(), [&](const cp::LaunchConfig& lc, cudaStream_t s) {
      avg_forward_kernel<T, Adaptive><<<lc.blocks, lc.threads, 0, s>>>(g, device_ptr<const T>(x), device_ptr<T>(y));
    });
  });
}

void adaptive_avg_pool2d_backward(const Tensor& gy, const Tensor& gx) {
  check_pair("adaptive_avg_pool2d", gx, gy);
  if (gx.numel() == 0) return;
  const Geometry g = geometry(gx, gy, Pool2dParams{});
  if (g.oh == 0 || g.ow == 0) {  // no outputs: every input's gradient is 0
    backend::fill(gx, 0.0);
    return;
  }
  visit_floating(gx.dtype(), "adaptive_avg_pool2d", [&]<class T>() {
    launch(gx, gx.numel(), [&](const cp::LaunchConfig& lc, cudaStream_t s) {
      avg_backward_kernel<T, Adaptive><<<lc.blocks, lc.threads, 0, s>>>(g, device_ptr<const T>(gy), device_ptr<T>(gx));
    });
  });
}

}  // namespace mixgrad::backend::cuda
