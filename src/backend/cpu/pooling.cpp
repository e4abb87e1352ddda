// CPU 2-d pooling: the choice of path, and the built-in loops, on NCHW or
// channels-last pairs alike (each read and written as it lies). Max pooling
// over 2 x 2 windows with stride 2 runs max_pool_2x2.cpp. oneDNN pooling
// (backend/onednn/pooling.cpp: max, avg excluding padding) runs float32 and
// bfloat16, float16 by way of float32; the walks here run the rest,
// accumulating in float / double. Adaptive
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
// One walk serves both layouts of an [N, C, H, W] pair (x and y both
// contiguous, or both channels-last): NCHW is N * C groups (planes) of one
// lane, channels-last N groups (images) of C lanes, a pixel's C values
// adjacent. A group's pixel p lane l is at p * lanes + l; the lane loops are
// innermost, so on channels-last they run along contiguous C (vectorised
// where the body allows) and each window is read once for all channels.
// Per element the arithmetic and its order are the same in both layouts, so
// their results agree bit for bit.

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

// True when the pair (x, y or gx, gy) is laid out channels-last: either is
// not contiguous (a tensor with C == 1 or H * W == 1 is both, and its memory
// is the same either way).
bool channels_last(const Tensor& a, const Tensor& b) { return !a.is_contiguous() || !b.is_contiguous(); }
// The layout of the pair, for a workspace indexed as y.
MemoryFormat format_of(const Tensor& a, const Tensor& b) {
  return channels_last(a, b) ? MemoryFormat::channels_last : MemoryFormat::contiguous;
}

struct Walk {
  int64_t groups, lanes, h, w, oh, ow;
};
Walk walk_of(const Tensor& x, const Tensor& y) {
  const Shape& s = x.shape();
  const bool cl = channels_last(x, y);
  return {cl ? s[0] : s[0] * s[1], cl ? s[1] : 1, s[2], s[3], y.shape()[2], y.shape()[3]};
}

// Calls f.template operator()<kCL>() for the pair's layout: kCL makes the
// lane count a constant 1 in the NCHW copy of each loop.
template <class F>
void by_layout(const Tensor& a, const Tensor& b, F&& f) {
  if (channels_last(a, b)) f.template operator()<true>();
  else f.template operator()<false>();
}

template <bool kCL>
int64_t lanes(const Walk& wk) {
  return kCL ? wk.lanes : 1;
}

// The reductions of the forwards over one window, fed its pixels in order
// (`pixel`: the offset in the plane; v: the pixel's lanes). Max pooling's:
// each lane's maximum and where it is (NaN wins, as in max), written with
// the argmax (the pixel, whatever the layout).
template <class T>
struct MaxOfWindow {
  using Acc = kernels::compute_t<T>;
  int32_t* argmax;
  std::vector<Acc> best{};
  std::vector<int64_t> at{};
  void reset(int64_t lanes) {
    best.assign(static_cast<size_t>(lanes), -std::numeric_limits<Acc>::infinity());
    at.assign(static_cast<size_t>(lanes), -1);
  }
  void add(const T* v, int64_t pixel, int64_t lanes) {
    for (int64_t l = 0; l < lanes; ++l) {
      const Acc a = kernels::cast<Acc>(v[l]);
      const auto i = static_cast<size_t>(l);
      if (at[i] < 0 || a > best[i] || (std::isnan(a) && !std::isnan(best[i]))) {
        best[i] = a;
        at[i] = pixel;
      }
    }
  }
  // Output pixel o (its first lane's offset in y) of the group at `in`.
  void write(T* y, int64_t o, const T* in, int64_t lanes, int64_t /*count*/) const {
    for (int64_t l = 0; l < lanes; ++l) {
      const auto i = static_cast<size_t>(l);
      y[o + l] = at[i] < 0 ? kernels::cast<T>(best[i]) : in[at[i] * lanes + l];
      argmax[o + l] = static_cast<int32_t>(at[i]);
    }
  }
};

// Average pooling's: each lane's mean over the `count` window pixels inside x.
template <class T>
struct MeanOfWindow {
  using Acc = kernels::compute_t<T>;
  std::vector<Acc> sum{};
  void reset(int64_t lanes) { sum.assign(static_cast<size_t>(lanes), Acc(0)); }
  void add(const T* v, int64_t /*pixel*/, int64_t lanes) {
    Acc* s = sum.data();
    for (int64_t l = 0; l < lanes; ++l) s[l] += kernels::cast<Acc>(v[l]);
  }
  void write(T* y, int64_t o, const T* /*in*/, int64_t lanes, int64_t count) const {
    const Acc* s = sum.data();
    for (int64_t l = 0; l < lanes; ++l) y[o + l] = kernels::cast<T>(count > 0 ? s[l] / static_cast<Acc>(count) : Acc(0));
  }
};

// y = the reduction of each window of x, output rows (group, oh) in
// parallel; `start` is the reduction before a window's first pixel.
template <bool kCL, class T, class Windows, class Reduce>
void walk_forward(const Tensor& x, const Tensor& y, Windows wh, Windows ww, int64_t window, const Reduce& start) {
  const Walk wk = walk_of(x, y);
  const int64_t lanes = cpu::lanes<kCL>(wk);
  const T* xp = static_cast<const T*>(x.raw_data());
  T* yp = static_cast<T*>(y.raw_data());
  const int64_t grain = std::max<int64_t>(1, kernels::kParallelGrain / std::max<int64_t>(1, wk.ow * window * lanes));
  kernels::parallel_for(wk.groups * wk.oh, grain, [&](int64_t r0, int64_t r1) {
    Reduce r = start;
    for (int64_t row = r0; row < r1; ++row) {
      const int64_t g = row / wk.oh, oh = row % wk.oh;
      const T* in = xp + g * wk.h * wk.w * lanes;
      const auto [h0, h1] = wh(oh);
      for (int64_t ow = 0; ow < wk.ow; ++ow) {
        const auto [w0, w1] = ww(ow);
        r.reset(lanes);
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) r.add(in + (ih * wk.w + iw) * lanes, ih * wk.w + iw, lanes);
        r.write(yp, (row * wk.ow + ow) * lanes, in, lanes, (h1 - h0) * (w1 - w0));
      }
    }
  });
}

int64_t group_grain(const Walk& wk, int64_t window) {
  return std::max<int64_t>(1, kernels::kParallelGrain / std::max<int64_t>(1, wk.oh * wk.ow * wk.lanes * window));
}

template <bool kCL, class T>
void walk_max_backward(const Tensor& gy, const int32_t* argmax, const Tensor& gx) {
  using Acc = kernels::compute_t<T>;
  const Walk wk = walk_of(gx, gy);
  const int64_t lanes = cpu::lanes<kCL>(wk), outs = wk.oh * wk.ow * lanes;
  const T* gp = static_cast<const T*>(gy.raw_data());
  scatter_planes(static_cast<T*>(gx.raw_data()), wk.groups, wk.h * wk.w * lanes, group_grain(wk, 1),
                 [&](int64_t g, Acc* acc) {
                   for (int64_t o = g * outs; o < (g + 1) * outs; o += lanes)
                     for (int64_t l = 0; l < lanes; ++l)
                       if (argmax[o + l] >= 0) acc[argmax[o + l] * lanes + l] += kernels::cast<Acc>(gp[o + l]);
                 });
}

template <bool kCL, class T, class Windows>
void walk_avg_backward(const Tensor& gy, const Tensor& gx, Windows wh, Windows ww, int64_t window) {
  using Acc = kernels::compute_t<T>;
  const Walk wk = walk_of(gx, gy);
  const int64_t lanes = cpu::lanes<kCL>(wk);
  const T* gp = static_cast<const T*>(gy.raw_data());
  scatter_planes(static_cast<T*>(gx.raw_data()), wk.groups, wk.h * wk.w * lanes, group_grain(wk, window),
                 [&](int64_t g, Acc* acc) {
    for (int64_t oh = 0; oh < wk.oh; ++oh) {
      const auto [h0, h1] = wh(oh);
      for (int64_t ow = 0; ow < wk.ow; ++ow) {
        const auto [w0, w1] = ww(ow);
        const int64_t count = (h1 - h0) * (w1 - w0);
        if (count == 0) continue;
        const T* src = gp + ((g * wk.oh + oh) * wk.ow + ow) * lanes;
        for (int64_t ih = h0; ih < h1; ++ih)
          for (int64_t iw = w0; iw < w1; ++iw) {
            Acc* dst = acc + (ih * wk.w + iw) * lanes;
            for (int64_t l = 0; l < lanes; ++l) dst[l] += kernels::cast<Acc>(src[l]) / static_cast<Acc>(count);
          }
      }
    }
  });
}

template <bool kCL, class T>
void walk_max_gather(const Tensor& gx, const int32_t* argmax, const Tensor& gy) {
  const Walk wk = walk_of(gx, gy);
  const int64_t lanes = cpu::lanes<kCL>(wk), outs = wk.oh * wk.ow * lanes;
  const T* in = static_cast<const T*>(gx.raw_data());
  T* out = static_cast<T*>(gy.raw_data());
  kernels::parallel_for(wk.groups, group_grain(wk, 1), [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      const T* plane = in + g * wk.h * wk.w * lanes;
      for (int64_t o = g * outs; o < (g + 1) * outs; o += lanes)
        for (int64_t l = 0; l < lanes; ++l)
          out[o + l] = argmax[o + l] >= 0 ? plane[argmax[o + l] * lanes + l] : kernels::cast<T>(0.0f);
    }
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
  ws.data = empty(y.shape(), DType::int32, y.device(), format_of(x, y));
  ws.compute_dtype = y.dtype();
  if (y.numel() == 0) return ws;
  const PlaneWindows win = fixed_windows(p, x);
  int32_t* argmax = static_cast<int32_t*>(ws.data.raw_data());
  visit_floating(y.dtype(), "max_pool2d", [&]<class T>() {
    by_layout(x, y, [&]<bool kCL>() {
      walk_forward<kCL, T>(x, y, win.h, win.w, p.kernel.h * p.kernel.w, MaxOfWindow<T>{argmax});
    });
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
    ws.data = empty(y.shape(), DType::bool_, y.device(), format_of(x, y));
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
  const auto* argmax = static_cast<const int32_t*>(ws.data.raw_data());
  visit_floating(gx.dtype(), "max_pool2d", [&]<class T>() {
    by_layout(gx, gy, [&]<bool kCL>() { walk_max_backward<kCL, T>(gy, argmax, gx); });
  });
}

void max_pool2d_gather(const Tensor& gx, const MaxPoolWorkspace& ws, const Tensor& gy) {
  if (gy.numel() == 0) return;
  if (ws.kind != MaxPoolWorkspace::Kind::argmax)
    throw Error("max_pool2d: gathering a gradient needs the argmax workspace (max_pool2d_argmax)");
  const auto* argmax = static_cast<const int32_t*>(ws.data.raw_data());
  visit_floating(gy.dtype(), "max_pool2d", [&]<class T>() {
    by_layout(gx, gy, [&]<bool kCL>() { walk_max_gather<kCL, T>(gx, argmax, gy); });
  });
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
    by_layout(x, y, [&]<bool kCL>() {
      walk_forward<kCL, T>(x, y, win.h, win.w, p.kernel.h * p.kernel.w, MeanOfWindow<T>{});
    });
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
  visit_floating(gx.dtype(), "avg_pool2d", [&]<class T>() {
    by_layout(gx, gy, [&]<bool kCL>() { walk_avg_backward<kCL, T>(gy, gx, win.h, win.w, p.kernel.h * p.kernel.w); });
  });
}

void adaptive_avg_pool2d_forward(const Tensor& x, const Tensor& y) {
  if (y.numel() == 0) return;
  Pool2dParams p;
  if (onednn::enabled() && even_tiling(x, y, p)) return cpu::avg_pool2d_forward(x, y, p);
  const AdaptiveWindows wh{x.shape()[2], y.shape()[2]}, ww{x.shape()[3], y.shape()[3]};
  const int64_t window = (x.shape()[2] / y.shape()[2] + 1) * (x.shape()[3] / y.shape()[3] + 1);
  visit_floating(y.dtype(), "adaptive_avg_pool2d", [&]<class T>() {
    by_layout(x, y, [&]<bool kCL>() { walk_forward<kCL, T>(x, y, wh, ww, window, MeanOfWindow<T>{}); });
  });
}

void adaptive_avg_pool2d_backward(const Tensor& gy, const Tensor& gx) {
  if (gx.numel() == 0) return;
  Pool2dParams p;
  if (onednn::enabled() && gy.numel() > 0 && even_tiling(gx, gy, p)) return cpu::avg_pool2d_backward(gy, gx, p);
  const AdaptiveWindows wh{gx.shape()[2], gy.shape()[2]}, ww{gx.shape()[3], gy.shape()[3]};
  const int64_t window = (gx.shape()[2] / std::max<int64_t>(1, gy.shape()[2]) + 1) *
                         (gx.shape()[3] / std::max<int64_t>(1, gy.shape()[3]) + 1);
  visit_floating(gx.dtype(), "adaptive_avg_pool2d", [&]<class T>() {
    by_layout(gx, gy, [&]<bool kCL>() { walk_avg_backward<kCL, T>(gy, gx, wh, ww, window); });
  });
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
