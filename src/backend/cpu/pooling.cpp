// CPU 2-d pooling. Max pooling over 2 x 2 windows with stride 2 runs
// max_pool_2x2.cpp. oneDNN pooling (max, avg excluding padding) on plain NCHW
// for float32 and bfloat16, float16 by way of float32; direct loops over each
// (image, channel) plane otherwise, accumulating in float / double. Adaptive
// average pooling whose windows tile the input evenly is an avg pool and takes
// the oneDNN path; uneven windows take the loops.
#include <cmath>
#include <limits>
#include <vector>

#include "backend/copy.hpp"
#include "backend/cpu/max_pool_2x2.hpp"
#include "backend/onednn/onednn.hpp"
#include "backend/pooling.hpp"
#include "kernels/cast.hpp"
#include "kernels/loops.hpp"

#if MIXGRAD_WITH_ONEDNN
#include "backend/onednn/common.hpp"
#endif

namespace mixgrad::backend::cpu {

namespace {

#if MIXGRAD_WITH_ONEDNN

using dnnl::memory;

struct PoolForwardEntry {
  dnnl::pooling_forward prim;
  memory::desc x, y, ws;
};

struct PoolBackwardEntry {
  dnnl::pooling_backward prim;
  memory::desc gy, gx, ws;
};

struct PoolGeometry {
  memory::dims strides, kernel, pad_l, pad_r;
};

PoolGeometry geometry(const Pool2dParams& p) {
  return {{p.stride.h, p.stride.w}, {p.kernel.h, p.kernel.w}, {p.padding.h, p.padding.w}, {p.padding.h, p.padding.w}};
}

onednn::Key pool_key(onednn::Family f, dnnl::algorithm algo, const Shape& x, const Shape& y, DType dt,
                     const Pool2dParams& p) {
  onednn::Key k(f);
  k.add(static_cast<int64_t>(algo)).add(x).add(y).add(static_cast<int64_t>(dt));
  k.add(p.kernel.h).add(p.kernel.w).add(p.stride.h).add(p.stride.w).add(p.padding.h).add(p.padding.w);
  return k;
}

dnnl::pooling_forward::primitive_desc forward_pd(dnnl::algorithm algo, const memory::desc& x, const memory::desc& y,
                                                 const Pool2dParams& p) {
  const PoolGeometry g = geometry(p);
  const auto desc = MIXGRAD_ONEDNN_CHECK(dnnl::pooling_forward::desc(dnnl::prop_kind::forward_training, algo, x, y,
                                                                     g.strides, g.kernel, g.pad_l, g.pad_r));
  onednn::count_primitive();
  return MIXGRAD_ONEDNN_CHECK(dnnl::pooling_forward::primitive_desc(desc, onednn::engine(), true));
}

// Runs the forward; for max pooling fills `*workspace` with oneDNN's workspace.
bool onednn_pool_forward(dnnl::algorithm algo, const Tensor& x, const Tensor& y, const Pool2dParams& p,
                         Tensor* workspace) {
  if (y.dtype() == DType::float16) {
    Tensor y32 = empty(y.shape(), DType::float32, y.device());
    if (!onednn_pool_forward(algo, onednn::to_float32(x), y32, p, workspace)) return false;
    copy(y32, y);
    return true;
  }
  if (!onednn::native(y.dtype())) return false;
  const auto e = onednn::cache<PoolForwardEntry>().find_or_make(
      pool_key(onednn::Family::pool_forward, algo, x.shape(), y.shape(), y.dtype(), p),
      [&]() -> std::shared_ptr<PoolForwardEntry> {
        auto e = std::make_shared<PoolForwardEntry>();
        e->x = onednn::plain_md(x.shape(), x.dtype());
        e->y = onednn::plain_md(y.shape(), y.dtype());
        const auto pd = forward_pd(algo, e->x, e->y, p);
        if (!pd) return nullptr;
        e->ws = pd.workspace_desc();
        e->prim = MIXGRAD_ONEDNN_CHECK(dnnl::pooling_forward(pd));
        return e;
      });
  if (!e) return false;
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, onednn::memory(e->x, x)},
                                       {DNNL_ARG_DST, onednn::memory(e->y, y)}};
  if (workspace && e->ws) {
    *workspace = empty(Shape{static_cast<int64_t>(e->ws.get_size())}, DType::bool_, y.device());
    args.emplace(DNNL_ARG_WORKSPACE, onednn::memory(e->ws, *workspace));
  }
  onednn::execute(e->prim, args);
  return true;
}

bool onednn_pool_backward(dnnl::algorithm algo, const Tensor& gy, const Tensor& gx, const Pool2dParams& p,
                          const Tensor* workspace) {
  if (gx.dtype() == DType::float16) {
    Tensor gx32 = empty(gx.shape(), DType::float32, gx.device());
    if (!onednn_pool_backward(algo, onednn::to_float32(gy), gx32, p, workspace)) return false;
    copy(gx32, gx);
    return true;
  }
  if (!onednn::native(gx.dtype())) return false;
  const auto e = onednn::cache<PoolBackwardEntry>().find_or_make(
      pool_key(onednn::Family::pool_backward, algo, gx.shape(), gy.shape(), gx.dtype(), p),
      [&]() -> std::shared_ptr<PoolBackwardEntry> {
        auto e = std::make_shared<PoolBackwardEntry>();
        e->gx = onednn::plain_md(gx.shape(), gx.dtype());
        e->gy = onednn::plain_md(gy.shape(), gy.dtype());
        const auto hint = forward_pd(algo, e->gx, e->gy, p);
        if (!hint) return nullptr;
        const PoolGeometry g = geometry(p);
        const auto desc = MIXGRAD_ONEDNN_CHECK(
            dnnl::pooling_backward::desc(algo, e->gx, e->gy, g.strides, g.kernel, g.pad_l, g.pad_r));
        const auto pd =
            MIXGRAD_ONEDNN_CHECK(dnnl::pooling_backward::primitive_desc(desc, onednn::engine(), hint, true));
        if (!pd) return nullptr;
        e->ws = hint.workspace_desc();
        e->prim = MIXGRAD_ONEDNN_CHECK(dnnl::pooling_backward(pd));
        return e;
      });
  if (!e) return false;
  std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, onednn::memory(e->gy, gy)},
                                       {DNNL_ARG_DIFF_SRC, onednn::memory(e->gx, gx)}};
  if (workspace) args.emplace(DNNL_ARG_WORKSPACE, onednn::memory(e->ws, *workspace));
  onednn::execute(e->prim, args);
  return true;
}

#endif  // MIXGRAD_WITH_ONEDNN

// ---- built-in path ------------------------------------------------------------

// Input range [first, last) of output position o along one axis.
struct FixedWindows {
  int64_t kernel, stride, padding, in;
  std::pair<int64_t, int64_t> operator()(int64_t o) const {
    const int64_t b = o * stride - padding;
    return {std::max<int64_t>(b, 0), std::min(b + kernel, in)};
  }
};
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

template <class T>
void fallback_max_forward(const Tensor& x, const Tensor& y, const Pool2dParams& p, int32_t* argmax) {
  using Acc = kernels::compute_t<T>;
  const Planes pl = planes(x, y);
  const FixedWindows wh{p.kernel.h, p.stride.h, p.padding.h, pl.h}, ww{p.kernel.w, p.stride.w, p.padding.w, pl.w};
  const T* xp = static_cast<const T*>(x.raw_data());
  T* yp = static_cast<T*>(y.raw_data());
  kernels::parallel_for(pl.count, plane_grain(pl, p.kernel.h * p.kernel.w), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const T* in = xp + c * pl.h * pl.w;
      for (int64_t oh = 0; oh < pl.oh; ++oh) {
        const auto [h0, h1] = wh(oh);
        for (int64_t ow = 0; ow < pl.ow; ++ow) {
          const auto [w0, w1] = ww(ow);
          int64_t best_at = -1;
          Acc best = -std::numeric_limits<Acc>::infinity();
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) {
              const Acc v = kernels::cast<Acc>(in[ih * pl.w + iw]);
              if (best_at < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {  // NaN wins, as in max
                best = v;
                best_at = ih * pl.w + iw;
              }
            }
          const int64_t o = (c * pl.oh + oh) * pl.ow + ow;
          yp[o] = best_at < 0 ? kernels::cast<T>(best) : in[best_at];
          argmax[o] = static_cast<int32_t>(best_at);
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
  T* out = static_cast<T*>(gx.raw_data());
  kernels::parallel_for(pl.count, plane_grain(pl, 1), [&](int64_t c0, int64_t c1) {
    std::vector<Acc> acc(static_cast<size_t>(pl.h * pl.w));
    for (int64_t c = c0; c < c1; ++c) {
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (int64_t o = c * pl.oh * pl.ow; o < (c + 1) * pl.oh * pl.ow; ++o)
        if (argmax[o] >= 0) acc[argmax[o]] += kernels::cast<Acc>(gp[o]);
      for (int64_t i = 0; i < pl.h * pl.w; ++i) out[c * pl.h * pl.w + i] = kernels::cast<T>(acc[i]);
    }
  });
}

template <class T, class Windows>
void fallback_avg_forward(const Tensor& x, const Tensor& y, Windows wh, Windows ww, int64_t window) {
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
          Acc s = 0;
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) s += kernels::cast<Acc>(in[ih * pl.w + iw]);
          const int64_t count = (h1 - h0) * (w1 - w0);
          yp[(c * pl.oh + oh) * pl.ow + ow] = kernels::cast<T>(count > 0 ? s / static_cast<Acc>(count) : Acc(0));
        }
      }
    }
  });
}

template <class T, class Windows>
void fallback_avg_backward(const Tensor& gy, const Tensor& gx, Windows wh, Windows ww, int64_t window) {
  using Acc = kernels::compute_t<T>;
  const Planes pl = planes(gx, gy);
  const T* gp = static_cast<const T*>(gy.raw_data());
  T* out = static_cast<T*>(gx.raw_data());
  kernels::parallel_for(pl.count, plane_grain(pl, window), [&](int64_t c0, int64_t c1) {
    std::vector<Acc> acc(static_cast<size_t>(pl.h * pl.w));
    for (int64_t c = c0; c < c1; ++c) {
      std::fill(acc.begin(), acc.end(), Acc(0));
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
      for (int64_t i = 0; i < pl.h * pl.w; ++i) out[c * pl.h * pl.w + i] = kernels::cast<T>(acc[i]);
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
      onednn_pool_forward(dnnl::algorithm::pooling_max, x, y, p, &ws.data)) {
    ws.kind = MaxPoolWorkspace::Kind::onednn;
    ws.compute_dtype = y.dtype() == DType::float16 ? DType::float32 : y.dtype();
    return ws;
  }
#endif
  ws.kind = MaxPoolWorkspace::Kind::argmax;
  ws.data = empty(y.shape(), DType::int32, y.device());
  visit_floating(y.dtype(), "max_pool2d",
                 [&]<class T>() { fallback_max_forward<T>(x, y, p, static_cast<int32_t*>(ws.data.raw_data())); });
  return ws;
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
    if (onednn_pool_backward(dnnl::algorithm::pooling_max, gy, gx, p, &ws.data)) return;
#endif
    throw Error("max_pool2d: oneDNN ran the forward but has no backward for gradient " +
                std::string(to_string(gx.dtype())) + to_string(gx.shape()));
  }
  visit_floating(gx.dtype(), "max_pool2d",
                 [&]<class T>() { fallback_max_backward<T>(gy, static_cast<const int32_t*>(ws.data.raw_data()), gx); });
}

void avg_pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dParams& p) {
  if (y.numel() == 0) return;
#if MIXGRAD_WITH_ONEDNN
  if (onednn::use_for(y.numel() * p.kernel.h * p.kernel.w) &&
      onednn_pool_forward(dnnl::algorithm::pooling_avg_exclude_padding, x, y, p, nullptr))
    return;
#endif
  const FixedWindows wh{p.kernel.h, p.stride.h, p.padding.h, x.shape()[2]};
  const FixedWindows ww{p.kernel.w, p.stride.w, p.padding.w, x.shape()[3]};
  visit_floating(y.dtype(), "avg_pool2d",
                 [&]<class T>() { fallback_avg_forward<T>(x, y, wh, ww, p.kernel.h * p.kernel.w); });
}

void avg_pool2d_backward(const Tensor& gy, const Tensor& gx, const Pool2dParams& p) {
  if (gx.numel() == 0) return;
#if MIXGRAD_WITH_ONEDNN
  if (gy.numel() > 0 && onednn::use_for(gy.numel() * p.kernel.h * p.kernel.w) &&
      onednn_pool_backward(dnnl::algorithm::pooling_avg_exclude_padding, gy, gx, p, nullptr))
    return;
#endif
  const FixedWindows wh{p.kernel.h, p.stride.h, p.padding.h, gx.shape()[2]};
  const FixedWindows ww{p.kernel.w, p.stride.w, p.padding.w, gx.shape()[3]};
  visit_floating(gx.dtype(), "avg_pool2d",
                 [&]<class T>() { fallback_avg_backward<T>(gy, gx, wh, ww, p.kernel.h * p.kernel.w); });
}

void adaptive_avg_pool2d_forward(const Tensor& x, const Tensor& y) {
  if (y.numel() == 0) return;
  Pool2dParams p;
  if (onednn::enabled() && even_tiling(x, y, p)) return cpu::avg_pool2d_forward(x, y, p);
  const AdaptiveWindows wh{x.shape()[2], y.shape()[2]}, ww{x.shape()[3], y.shape()[3]};
  const int64_t window = (x.shape()[2] / y.shape()[2] + 1) * (x.shape()[3] / y.shape()[3] + 1);
  visit_floating(y.dtype(), "adaptive_avg_pool2d", [&]<class T>() { fallback_avg_forward<T>(x, y, wh, ww, window); });
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
