// CUDA 2-d pooling (backend/pooling.hpp): mixgrad's own grid-stride kernels,
// not cuDNN's pooling. Max pooling must hand its backward the
// MaxPoolWorkspace the CPU defines (Kind::argmax: the int32 offset of each
// maximum within its input plane, -1 for a window wholly in the padding),
// which cuDNN does not expose (its backward re-reads x and y instead); own
// kernels also give the CPU's exact rules (NaN wins, padded positions never
// do, averages count only the inside positions) in every floating dtype.
//
// Forward: one thread per output walks its window (cuda_plan::fixed_window /
// adaptive_window; the maximum by cuda_plan::window_argmax, the CPU's tie
// rule). Backward: one thread per input gathers from the outputs whose
// window holds it (cuda_plan::fixed_outputs_of / adaptive_outputs_of), so
// there are no atomics and the sum order is fixed (deterministic). Max and
// average pooling share these two kernel bodies; a policy (Max / Avg) says
// what an output makes of its window. Math in kernels::compute_t<T> (float
// for the 16-bit types), as the CPU. The recorded (higher-order) max-pool
// gradient runs the same forward (max_pool2d_argmax) and gathers its
// gradient through the argmax (max_pool2d_gather).
//
// Channels-last pairs (x and y, or gx and gy, both NHWC) run as they lie:
// a thread's element index is its memory index, split into (plane, row,
// column) by the layout (Geometry::lanes = C: lanes innermost), and a
// plane's pixels are `lanes` apart. Adjacent threads then take adjacent
// channels of one pixel, so the loads coalesce along C. The argmax stays
// the offset within the plane (h * w + w), in either layout.
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
  int64_t lanes;                   // 1 for NCHW; C for channels-last (a plane's pixels lie C apart)
};

// True when the pair is laid out channels-last: either is not contiguous (a
// tensor with C == 1 or H * W == 1 is both; its memory is the same either way).
bool channels_last(const Tensor& a, const Tensor& b) { return !a.is_contiguous() || !b.is_contiguous(); }

Geometry geometry(const Tensor& x, const Tensor& y, const Pool2dParams& p) {
  return {x.shape()[0] * x.shape()[1], x.shape()[2], x.shape()[3], y.shape()[2], y.shape()[3],
          p.kernel.h,                  p.kernel.w,   p.stride.h,   p.stride.w,   p.padding.h, p.padding.w,
          channels_last(x, y) ? x.shape()[1] : 1};
}

// Memory index i of a tensor of planes of hh x ww as (plane, row, column).
__device__ void split(const Geometry& g, int64_t i, int64_t hh, int64_t ww, int64_t& plane, int64_t& r, int64_t& c) {
  const int64_t l = i % g.lanes, pixel = i / g.lanes;
  c = pixel % ww;
  r = (pixel / ww) % hh;
  plane = (pixel / (ww * hh)) * g.lanes + l;
}

// The memory index of pixel `pixel` (row * ww + column) of plane `plane`
// in a tensor of planes of plane_size pixels.
__device__ int64_t offset(const Geometry& g, int64_t plane, int64_t pixel, int64_t plane_size) {
  return (plane / g.lanes) * plane_size * g.lanes + pixel * g.lanes + plane % g.lanes;
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

// What an output makes of its window (forward) and what an input takes from
// the outputs whose window holds it (backward): the only difference between
// max and average pooling. One kernel body per direction serves both, with
// the window walker (Fixed / Adaptive) and this policy as template
// parameters; instantiated for (Fixed, Max), (Fixed, Avg), (Adaptive, Avg).
struct Max {
  // y = the window's maximum, its plane offset to argmax (the CPU's tie rule).
  // `in`: the plane's first pixel, its pixels g.lanes apart.
  template <class T, class A>
  __device__ static void forward(const Geometry& g, const T* in, int64_t h0, int64_t h1, int64_t w0, int64_t w1,
                                 int64_t width, T& y, int32_t* argmax) {
    const int64_t step = g.lanes;
    const int64_t at =
        cp::window_argmax<A>(h0, h1, w0, w1, width, [in, step](int64_t k) { return cast<A>(in[k * step]); });
    y = at < 0 ? cast<T>(-INFINITY) : in[at * step];
    *argmax = static_cast<int32_t>(at);
  }
  // gy[o] when input `at` is output o's maximum.
  template <class A, class T, class W>
  __device__ static A share(const Geometry&, const T* gy, const int32_t* argmax, int64_t o, int64_t, int64_t,
                            int32_t at) {
    return argmax[o] == at ? cast<A>(gy[o]) : A(0);
  }
};

struct Avg {
  // y = the mean over the window's inside positions.
  template <class T, class A>
  __device__ static void forward(const Geometry& g, const T* in, int64_t h0, int64_t h1, int64_t w0, int64_t w1,
                                 int64_t width, T& y, int32_t*) {
    A s = 0;
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t iw = w0; iw < w1; ++iw) s += cast<A>(in[(ih * width + iw) * g.lanes]);
    const int64_t count = (h1 - h0) * (w1 - w0);
    y = cast<T>(count > 0 ? s / static_cast<A>(count) : A(0));
  }
  // gy[o] spread evenly over output o's inside positions.
  template <class A, class T, class W>
  __device__ static A share(const Geometry& g, const T* gy, const int32_t*, int64_t o, int64_t oh, int64_t ow,
                            int32_t) {
    int64_t h0, h1, w0, w1;
    W::window(g, oh, ow, h0, h1, w0, w1);
    const int64_t count = (h1 - h0) * (w1 - w0);
    return count > 0 ? cast<A>(gy[o]) / static_cast<A>(count) : A(0);
  }
};

// A thread per output walks its window.
template <class T, class W, class Pool>
__global__ void pool_forward_kernel(Geometry g, const T* x, T* y, int32_t* argmax) {
  using A = kernels::compute_t<T>;
  const int64_t n = g.planes * g.oh * g.ow;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < n;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t c, oh, ow;
    split(g, o, g.oh, g.ow, c, oh, ow);
    int64_t h0, h1, w0, w1;
    W::window(g, oh, ow, h0, h1, w0, w1);
    Pool::template forward<T, A>(g, x + offset(g, c, 0, g.h * g.w), h0, h1, w0, w1, g.w, y[o],
                                 argmax != nullptr ? argmax + o : nullptr);
  }
}

// A thread per input gathers from the outputs whose window holds it, in a
// fixed order: no atomics, deterministic.
template <class T, class W, class Pool>
__global__ void pool_backward_kernel(Geometry g, const T* gy, const int32_t* argmax, T* gx) {
  using A = kernels::compute_t<T>;
  const int64_t n = g.planes * g.h * g.w;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t c, ih, iw;
    split(g, i, g.h, g.w, c, ih, iw);
    const int32_t at = static_cast<int32_t>(ih * g.w + iw);
    int64_t o0, o1, p0, p1;
    W::outputs(g, ih, iw, o0, o1, p0, p1);
    A acc = 0;
    for (int64_t oh = o0; oh < o1; ++oh)
      for (int64_t ow = p0; ow < p1; ++ow)
        acc += Pool::template share<A, T, W>(g, gy, argmax, offset(g, c, oh * g.ow + ow, g.oh * g.ow), oh, ow, at);
    gx[i] = cast<T>(acc);
  }
}

// gy[o] = gx at output o's maximum (0 for an empty window): the adjoint of
// the max backward. A plain copy of the stored bits, so one kernel per
// element size; the zero of every floating dtype is all zero bits.
template <class U>
__global__ void max_gather_kernel(Geometry g, int64_t n, const U* gx, const int32_t* argmax, U* gy) {
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < n;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t c, oh, ow;
    split(g, o, g.oh, g.ow, c, oh, ow);
    const int32_t at = argmax[o];
    gy[o] = at >= 0 ? gx[offset(g, c, at, g.h * g.w)] : U(0);
  }
}

// Both contiguous, or both channels-last (a workspace laid out as its output).
bool same_layout(const Tensor& a, const Tensor& b) {
  return (a.is_contiguous() && b.is_contiguous()) ||
         (a.is_contiguous(MemoryFormat::channels_last) && b.is_contiguous(MemoryFormat::channels_last));
}

void check_pair(const char* op, const Tensor& in, const Tensor& out) {
  if (in.device() != out.device())
    throw DeviceError(std::string(op) + ": input on " + to_string(in.device()) + ", output on " +
                      to_string(out.device()) + "; move it with Tensor::to(Device) first");
  if (in.dtype() != out.dtype())
    throw DTypeError(std::string(op) + ": input " + std::string(to_string(in.dtype())) + to_string(in.shape()) +
                     " and output " + std::string(to_string(out.dtype())) + to_string(out.shape()) + " differ");
  if (in.ndim() != 4 || out.ndim() != 4 || !same_layout(in, out))
    throw ShapeError(std::string(op) + ": expected [N, C, H, W] operands both contiguous or both channels-last, got " +
                     to_string(in.shape()) + " and " + to_string(out.shape()));
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

// The argmax workspace of y's shape on y's device, and y, from the built-in
// kernel: the CUDA backend's only max-pooling path, so the forward and the
// recorded (higher-order) gradient's argmax are one function.
MaxPoolWorkspace max_pool2d_argmax(const Tensor& x, const Tensor& y, const Pool2dParams& p) {
  check_pair("max_pool2d", x, y);
  MaxPoolWorkspace ws;
  ws.kind = MaxPoolWorkspace::Kind::argmax;
  ws.compute_dtype = y.dtype();
  ws.data = empty(y.shape(), DType::int32, y.device(),
                  channels_last(x, y) ? MemoryFormat::channels_last : MemoryFormat::contiguous);
  const Geometry g = geometry(x, y, p);
  visit_floating(y.dtype(), "max_pool2d", [&]<class T>() {
    launch(y, y.numel(), [&](const cp::LaunchConfig& lc, cudaStream_t s) {
      pool_forward_kernel<T, Fixed, Max><<<lc.blocks, lc.threads, 0, s>>>(g, device_ptr<const T>(x), device_ptr<T>(y),
                                                                          device_ptr<int32_t>(ws.data));
    });
  });
  return ws;
}

MaxPoolWorkspace max_pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dParams& p) {
  return cuda::max_pool2d_argmax(x, y, p);
}

namespace {
void check_argmax(const MaxPoolWorkspace& ws, const Tensor& gy, const Tensor& on) {
  if (ws.kind != MaxPoolWorkspace::Kind::argmax || !ws.data.defined() || ws.data.device() != gy.device() ||
      ws.data.shape() != gy.shape() || ws.data.dtype() != DType::int32 || !same_layout(ws.data, gy))
    throw StateError("max_pool2d: the backward on " + to_string(on.device()) + " needs the argmax workspace of a "
                     "forward on that device for output " + to_string(gy.shape()));
}
}  // namespace

void max_pool2d_backward(const Tensor& gy, const MaxPoolWorkspace& ws, const Tensor& gx, const Pool2dParams& p) {
  check_pair("max_pool2d", gx, gy);
  check_argmax(ws, gy, gx);
  const Geometry g = geometry(gx, gy, p);
  visit_floating(gx.dtype(), "max_pool2d", [&]<class T>() {
    launch(gx, gx.numel(), [&](const cp::LaunchConfig& lc, cudaStream_t s) {
      pool_backward_kernel<T, Fixed, Max><<<lc.blocks, lc.threads, 0, s>>>(
          g, device_ptr<const T>(gy), device_ptr<const int32_t>(ws.data), device_ptr<T>(gx));
    });
  });
}

void max_pool2d_gather(const Tensor& gx, const MaxPoolWorkspace& ws, const Tensor& gy) {
  check_pair("max_pool2d", gx, gy);
  check_argmax(ws, gy, gy);
  if (gy.numel() == 0) return;
  const Geometry g = geometry(gx, gy, Pool2dParams{});
  visit_floating(gy.dtype(), "max_pool2d", [&]<class T>() {
    using U = std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;
    launch(gy, gy.numel(), [&](const cp::LaunchConfig& lc, cudaStream_t s) {
      max_gather_kernel<U><<<lc.blocks, lc.threads, 0, s>>>(g, gy.numel(), static_cast<const U*>(gx.raw_data()),
                                                            device_ptr<const int32_t>(ws.data),
                                                            static_cast<U*>(gy.raw_data()));
    });
  });
}

void avg_pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dParams& p) {
  check_pair("avg_pool2d", x, y);
  const Geometry g = geometry(x, y, p);
  visit_floating(y.dtype(), "avg_pool2d", [&]<class T>() {
    launch(y, y.numel(), [&](const cp::LaunchConfig& lc, cudaStream_t s) {
      pool_forward_kernel<T, Fixed, Avg><<<lc.blocks, lc.threads, 0, s>>>(g, device_ptr<const T>(x), device_ptr<T>(y),
                                                                         nullptr);
    });
  });
}

void avg_pool2d_backward(const Tensor& gy, const Tensor& gx, const Pool2dParams& p) {
  check_pair("avg_pool2d", gx, gy);
  const Geometry g = geometry(gx, gy, p);
  visit_floating(gx.dtype(), "avg_pool2d", [&]<class T>() {
    launch(gx, gx.numel(), [&](const cp::LaunchConfig& lc, cudaStream_t s) {
      pool_backward_kernel<T, Fixed, Avg><<<lc.blocks, lc.threads, 0, s>>>(g, device_ptr<const T>(gy), nullptr,
                                                                          device_ptr<T>(gx));
    });
  });
}

void adaptive_avg_pool2d_forward(const Tensor& x, const Tensor& y) {
  check_pair("adaptive_avg_pool2d", x, y);
  if (y.numel() == 0) return;
  const Geometry g = geometry(x, y, Pool2dParams{});
  visit_floating(y.dtype(), "adaptive_avg_pool2d", [&]<class T>() {
    launch(y, y.numel(), [&](const cp::LaunchConfig& lc, cudaStream_t s) {
      pool_forward_kernel<T, Adaptive, Avg><<<lc.blocks, lc.threads, 0, s>>>(g, device_ptr<const T>(x), device_ptr<T>(y),
                                                                         nullptr);
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
      pool_backward_kernel<T, Adaptive, Avg><<<lc.blocks, lc.threads, 0, s>>>(g, device_ptr<const T>(gy), nullptr,
                                                                             device_ptr<T>(gx));
    });
  });
}

MIXGRAD_CUDA_KERNEL(max_pool2d_forward, max_pool2d_forward);
MIXGRAD_CUDA_KERNEL(max_pool2d_backward, max_pool2d_backward);
MIXGRAD_CUDA_KERNEL(max_pool2d_argmax, max_pool2d_argmax);
MIXGRAD_CUDA_KERNEL(max_pool2d_gather, max_pool2d_gather);
MIXGRAD_CUDA_KERNEL(avg_pool2d_forward, avg_pool2d_forward);
MIXGRAD_CUDA_KERNEL(avg_pool2d_backward, avg_pool2d_backward);
MIXGRAD_CUDA_KERNEL(adaptive_avg_pool2d_forward, adaptive_avg_pool2d_forward);
MIXGRAD_CUDA_KERNEL(adaptive_avg_pool2d_backward, adaptive_avg_pool2d_backward);

}  // namespace mixgrad::backend::cuda
