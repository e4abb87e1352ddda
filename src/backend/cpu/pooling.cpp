// CPU 2-d pooling: the choice of path, and the built-in loops. Max pooling
// over 2 x 2 windows with stride 2 runs max_pool_2x2.cpp. oneDNN pooling
// (backend/onednn/pooling.cpp: max, avg excluding padding) runs float32 and
// bfloat16, float16 by way of float32; direct loops over each (image,
// channel) plane here run the rest, accumulating in float / double. Adaptive
// average pooling whose windows tile the input evenly is an avg pool and
// takes the oneDNN path; uneven windows take the loops.
#include <cmath>
#include <limits>
#include <vector>

#include "backend/copy.hpp"
#include "backend/cpu/max_pool_2x2.hpp"
#include "backend/cpu/plane_scatter.hpp"
#include "backend/onednn/onednn.hpp"
#include "backend/onednn/pooling.hpp"
#include "backend/pooling.hpp"
#include "kernels/cast.hpp"
#include "kernels/loops.hpp"

namespace mixgrad::backend::cpu {

namespace {


// ---- built-in path ------------------------------------------------------------

// Input range [first, last) of output position o along one axis.
struct FixedWindows {
  int64_t kernel, stride, padding, in;
  std::pair<int64_t, int64_t> operator()(int64_t o) const {
    const int64_t b = o * stride - padding;
    return {std::max<int64_t>(b, 0), std::min(b + kernel, in)};
  }
};
// The fixed windows of p along the rows and the columns of x [N, C, H, W].
struct PlaneWindows {
  FixedWindows h, w;
};
PlaneWindows fixed_windows(const Pool2dParams& p, const Tensor& x) {
  return {{p.kernel.h, p.stride.h, p.padding.h, x.shape()[2]}, {p.kernel.w, p.stride.w, p.padding.w, x.shape()[3]}};
}

struct AdaptiveWindows {
  int64_t in, out;
  std::pair<int64_t, int64_t> operator()(int64_t o) const { return {o * in / out, ((o + 1) * in + out - 1) / out}; }
};

struct Planes {
  int64_t count, h, w, oh, ow;
};
Planes planes(const Tensor& x, const Tensor& y) {
  return {x.shape()[0] * x.shape()[1], x.shape()[2], x.shape()[3], y.shape()[2], y.shape()[3]};
}
int64_t plane_grain(const Planes& pl, int64_t window) {
  return std::max<int64_t>(1, kernels::kParallelGrain / std::max<int64_t>(1, pl.oh * pl.ow * window));
}

// The reductions of the forwards over one window, fed its elements in order
// (`at`: the element's offset in its plane). Max pooling's: the maximum and
// where it is (NaN wins, as in max), written with the argmax.
template <class T>
struct MaxOfWindow {
  using Acc = kernels::compute_t<T>;
  int32_t* argmax;
  Acc best = -std::numeric_limits<Acc>::infinity();
  int64_t best_at = -1;
  void add(Acc v, int64_t at) {
    if (best_at < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
      best = v;
      best_at = at;
    }
  }
  void write(T* y, int64_t o, const T* in, int64_t /*count*/) const {
    y[o] = best_at < 0 ? kernels::cast<T>(best) : in[best_at];
    argmax[o] = static_cast<int32_t>(best_at);
  }
};

// Average pooling's: the mean of the `count` window elements inside x.
template <class T>
struct MeanOfWindow {
  using Acc = kernels::compute_t<T>;
  Acc sum = 0;
  void add(Acc v, int64_t /*at*/) { sum += v; }
  void write(T* y, int64_t o, const T* /*in*/, int64_t count) const {
    y[o] = kernels::cast<T>(count > 0 ? sum / static_cast<Acc>(count) : Acc(0));
  }
};

// y = the reduction of each window of x (planes in parallel); `start` is
// the reduction before a window's first element.
template <class T, class Windows, class Reduce>
void fallback_forward(const Tensor& x, const Tensor& y, Windows wh, Windows ww, int64_t window, const Reduce& start) {
  using Acc = kernels::compute_t<T>;
  const Planes pl = planes(x, y);
  const T* xp = static_cast<const T*>(x.raw_data());
  T* yp = static_cast<T*>(y.raw_data());
  kernels::parallel_for(pl.count, plane_grain(pl, window), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const T* in = xp + c * pl.h * pl.w;
      for (int64_t oh = 0; oh < pl.oh; ++oh) {
        const auto [h0, h1] = wh(oh);
        for (int64_t ow = 0; ow < pl.ow; ++ow) {
          const auto [w0, w1] = ww(ow);
          Reduce r = start;
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) r.add(kernels::cast<Acc>(in[ih * pl.w + iw]), ih * pl.w + iw);
          r.write(yp, (c * pl.oh + oh) * pl.ow + ow, in, (h1 - h0) * (w1 - w0));
        }
      }
    }
  });
}

template <class T>
void fallback_max_backward(const Tensor& gy, const int32_t* argmax, const Tensor& gx) {
  using Acc = kernels::compute_t<T>;
  const Planes pl = planes(gx, gy);
  const T* gp = static_cast<const T*>(gy.raw_data());
  scatter_planes(static_cast<T*>(gx.raw_data()), pl.count, pl.h * pl.w, plane_grain(pl, 1), [&](int64_t c, Acc* acc) {
    for (int64_t o = c * pl.oh * pl.ow; o < (c + 1) * pl.oh * pl.ow; ++o)
      if (argmax[o] >= 0) acc[argmax[o]] += kernels::cast<Acc>(gp[o]);
  });
}

template <class T, class Windows>
void fallback_avg_backward(const Tensor& gy, const Tensor& gx, Windows wh, Windows ww, int64_t window) {
  using Acc = kernels::compute_t<T>;
  const Planes pl = planes(gx, gy);
  const T* gp = static_cast<const T*>(gy.raw_data());
  T* out = static_cast<T*>(gx.raw_data());
  scatter_planes(out, pl.count, pl.h * pl.w, plane_grain(pl, window), [&](int64_t c, Acc* acc) {
    for (int64_t oh = 0; oh < pl.oh; ++oh) {
      const auto [h0, h1] = wh(oh);
      for (int64_t ow = 0; ow < pl.ow; ++ow) {
        const auto [w0, w1] = ww(ow);
        const int64_t count = (h1 - h0) * (w1 - w0);
        if (count == 0) continue;
        const Acc g = kernels::cast<Acc>(gp[(c * pl.oh + oh) * pl.ow + ow]) / static_cast<Acc>(count);
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) acc[ih * pl.w + iw] += g;
      }
    }
  });
}

template <class T>
void fallback_max_gather(const Tensor& gx, const int32_t* argmax, const Tensor& gy) {
  const Planes pl = planes(gx, gy);
  const T* in = static_cast<const T*>(gx.raw_data());
  T* out = static_cast<T*>(gy.raw_data());
  kernels::parallel_for(pl.count, plane_grain(pl, 1), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t o = c * pl.oh * pl.ow; o < (c + 1) * pl.oh * pl.ow; ++o)
        out[o] = argmax[o] >= 0 ? in[c * pl.h * pl.w + argmax[o]] : kernels::cast<T>(0.0f);
  });
}

// Adaptive pooling whose windows tile the input evenly, as a plain avg pool.
bool even_tiling(const Tensor& x, const Tensor& y, Pool2dParams& p) {
  const int64_t h = x.shape()[2], w = x.shape()[3], oh = y.shape()[2], ow = y.shape()[3];
  if (oh == 0 || ow == 0 || h % oh != 0 || w % ow != 0) return false;
  p = {{h / oh, w / ow}, {h / oh, w / ow}, {0, 0}};
  return true;
}

}  // namespace

// The built-in path, also the forward's last resort.
MaxPoolWorkspace max_pool2d_argmax(const Tensor& x, const Tensor& y, const Pool2dParams& p) {
  MaxPoolWorkspace ws;
  ws.kind = MaxPoolWorkspace::Kind::argmax;
  ws.data = empty(y.shape(), DType::int32, y.device());
  ws.compute_dtype = y.dtype();
  if (y.numel() == 0) return ws;
  const PlaneWindows win = fixed_windows(p, x);
  int32_t* argmax = static_cast<int32_t*>(ws.data.raw_data());
  visit_floating(y.dtype(), "max_pool2d", [&]<class T>() {
    fallback_forward<T>(x, y, win.h, win.w, p.kernel.h * p.kernel.w, MaxOfWindow<T>{argmax});
  });
  return ws;
}

MaxPoolWorkspace max_pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dParams& p) {
  MaxPoolWorkspace ws;
  if (y.numel() == 0) return ws;
  // 2 x 2 windows: the own kernels, 2-3x faster than oneDNN 2.6's pooling on
  // plain NCHW here. onednn::Mode::always still runs oneDNN, for the tests.
  if (max_pool_2x2::applies(p) && onednn::mode() != onednn::Mode::always) {
    ws.kind = MaxPoolWorkspace::Kind::window2x2;
    ws.data = empty(y.shape(), DType::bool_, y.device());
    ws.compute_dtype = y.dtype();
    max_pool_2x2::forward(x, y, ws.data);
    return ws;
  }
#if MIXGRAD_WITH_ONEDNN
  if (onednn::use_for(y.numel() * p.kernel.h * p.kernel.w) &&
      onednn::pool2d_forward(onednn::PoolKind::max, x, y, p, &ws.data)) {
    ws.kind = MaxPoolWorkspace::Kind::onednn;
    ws.compute_dtype = y.dtype() == DType::float16 ? DType::float32 : y.dtype();
    return ws;
  }
#endif
  return max_pool2d_argmax(x, y, p);
}

void max_pool2d_backward(const Tensor& gy, const MaxPoolWorkspace& ws, const Tensor& gx,
                         [[maybe_unused]] const Pool2dParams& p) {
  if (gy.numel() == 0) {
    fill(gx, 0.0);
    return;
  }
  if (ws.kind == MaxPoolWorkspace::Kind::window2x2) {
    max_pool_2x2::backward(gy, ws.data, gx);
    return;
  }
  if (ws.kind == MaxPoolWorkspace::Kind::onednn) {
#if MIXGRAD_WITH_ONEDNN
    if (onednn::pool2d_backward(onednn::PoolKind::max, gy, gx, p, &ws.data)) return;
#endif
    throw Error("max_pool2d: oneDNN ran the forward but has no backward for gradient " +
                std::string(to_string(gx.dtype())) + to_string(gx.shape()));
  }
  visit_floating(gx.dtype(), "max_pool2d",
                 [&]<class T>() { fallback_max_backward<T>(gy, static_cast<const int32_t*>(ws.data.raw_data()), gx); });
}

void max_pool2d_gather(const Tensor& gx, const MaxPoolWorkspace& ws, const Tensor& gy) {
  if (gy.numel() == 0) return;
  if (ws.kind != MaxPoolWorkspace::Kind::argmax)
    throw Error("max_pool2d: gathering a gradient needs the argmax workspace (max_pool2d_argmax)");
  visit_floating(gy.dtype(), "max_pool2d",
                 [&]<class T>() { fallback_max_gather<T>(gx, static_cast<const int32_t*>(ws.data.raw_data()), gy); });
}

void avg_pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dParams& p) {
  if (y.numel() == 0) return;
#if MIXGRAD_WITH_ONEDNN
  if (onednn::use_for(y.numel() * p.kernel.h * p.kernel.w) &&
      onednn::pool2d_forward(onednn::PoolKind::avg, x, y, p, nullptr))
    return;
#endif
  const PlaneWindows win = fixed_windows(p, x);
  visit_floating(y.dtype(), "avg_pool2d", [&]<class T>() {
    fallback_forward<T>(x, y, win.h, win.w, p.kernel.h * p.kernel.w, MeanOfWindow<T>{});
  });
}

void avg_pool2d_backward(const Tensor& gy, const Tensor& gx, const Pool2dParams& p) {
  if (gx.numel() == 0) return;
#if MIXGRAD_WITH_ONEDNN
  if (gy.numel() > 0 && onednn::use_for(gy.numel() * p.kernel.h * p.kernel.w) &&
      onednn::pool2d_backward(onednn::PoolKind::avg, gy, gx, p, nullptr))
    return;
#endif
  const PlaneWindows win = fixed_windows(p, gx);
  visit_floating(gx.dtype(), "avg_pool2d",
                 [&]<class T>() { fallback_avg_backward<T>(gy, gx, win.h, win.w, p.kernel.h * p.kernel.w); });
}

void adaptive_avg_pool2d_forward(const Tensor& x, const Tensor& y) {
  if (y.numel() == 0) return;
  Pool2dParams p;
  if (onednn::enabled() && even_tiling(x, y, p)) return cpu::avg_pool2d_forward(x, y, p);
  const AdaptiveWindows wh{x.shape()[2], y.shape()[2]}, ww{x.shape()[3], y.shape()[3]};
  const int64_t window = (x.shape()[2] / y.shape()[2] + 1) * (x.shape()[3] / y.shape()[3] + 1);
  visit_floating(y.dtype(), "adaptive_avg_pool2d",
                 [&]<class T>() { fallback_forward<T>(x, y, wh, ww, window, MeanOfWindow<T>{}); });
}

void adaptive_avg_pool2d_backward(const Tensor& gy, const Tensor& gx) {
  if (gx.numel() == 0) return;
  Pool2dParams p;
  if (onednn::enabled() && gy.numel() > 0 && even_tiling(gx, gy, p)) return cpu::avg_pool2d_backward(gy, gx, p);
  const AdaptiveWindows wh{gx.shape()[2], gy.shape()[2]}, ww{gx.shape()[3], gy.shape()[3]};
  const int64_t window = (gx.shape()[2] / std::max<int64_t>(1, gy.shape()[2]) + 1) *
                         (gx.shape()[3] / std::max<int64_t>(1, gy.shape()[3]) + 1);
  visit_floating(gx.dtype(), "adaptive_avg_pool2d",
                 [&]<class T>() { fallback_avg_backward<T>(gy, gx, wh, ww, window); });
}

}  // namespace mixgrad::backend::cpu

namespace mixgrad::backend {

MIXGRAD_CPU_KERNEL(max_pool2d_forward, cpu::max_pool2d_forward);
MIXGRAD_CPU_KERNEL(max_pool2d_backward, cpu::max_pool2d_backward);
MIXGRAD_CPU_KERNEL(max_pool2d_argmax, cpu::max_pool2d_argmax);
MIXGRAD_CPU_KERNEL(max_pool2d_gather, cpu::max_pool2d_gather);
MIXGRAD_CPU_KERNEL(avg_pool2d_forward, cpu::avg_pool2d_forward);
MIXGRAD_CPU_KERNEL(avg_pool2d_backward, cpu::avg_pool2d_backward);
MIXGRAD_CPU_KERNEL(adaptive_avg_pool2d_forward, cpu::adaptive_avg_pool2d_forward);
MIXGRAD_CPU_KERNEL(adaptive_avg_pool2d_backward, cpu::adaptive_avg_pool2d_backward);

}  // namespace mixgrad::backend
