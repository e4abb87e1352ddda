// CPU 2-d convolution. oneDNN for float32 and bfloat16 (float16 by way of
// float32): tensors stay plain NCHW / OIHW (GOIHW for groups) and are
// reordered per call into the blocked layouts the primitives choose, which
// measured about 2x faster here than the plain-layout (gemm) kernels,
// reorders included. The built-in path (im2col + gemm, accumulating in float
// / double) runs float64, tiny problems, configurations oneDNN lacks and
// builds without oneDNN.
#include <mutex>
#include <vector>

#include "backend/conv.hpp"
#include "backend/copy.hpp"
#include "backend/cpu/gemm.hpp"
#include "backend/onednn/onednn.hpp"
#include "kernels/cast.hpp"
#include "kernels/loops.hpp"

#if MIXGRAD_WITH_ONEDNN
#include "backend/onednn/common.hpp"
#endif

namespace mixgrad::backend::cpu {

namespace {

// Extents of one convolution, read off its tensors.
struct ConvDims {
  int64_t n, c, h, w;      // input
  int64_t o, kh, kw;       // weight
  int64_t oh, ow;          // output
  int64_t groups, cg, og;  // groups, channels per group in / out
  int64_t ckk() const { return cg * kh * kw; }
};

ConvDims conv_dims(const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p) {
  ConvDims d{x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3], w.shape()[0], w.shape()[2], w.shape()[3],
             y.shape()[2], y.shape()[3], p.groups, 0, 0};
  d.cg = d.c / d.groups;
  d.og = d.o / d.groups;
  return d;
}

#if MIXGRAD_WITH_ONEDNN

using dnnl::memory;
using onednn::Direction;
using onednn::LayoutArg;

memory::desc weights_md(const Tensor& w, int64_t groups, DType dt) {
  if (groups == 1) return onednn::plain_md(w.shape(), dt);
  const Shape s{groups, w.shape()[0] / groups, w.shape()[1], w.shape()[2], w.shape()[3]};
  return onednn::plain_md(s, dt);
}

// The same extents and dtype, layout left to the primitive.
memory::desc any_md(const memory::desc& plain) {
  return MIXGRAD_ONEDNN_CHECK(memory::desc(plain.dims(), plain.data_type(), memory::format_tag::any));
}

struct Geometry {
  memory::dims strides, dilates, pad_l, pad_r;
};

Geometry geometry(const Conv2dParams& p) {
  return {{p.stride.h, p.stride.w},
          {p.dilation.h - 1, p.dilation.w - 1},
          {p.padding.h, p.padding.w},
          {p.padding.h, p.padding.w}};
}

onednn::Key conv_key(onednn::Family f, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                     const Conv2dParams& p) {
  onednn::Key k(f);
  k.add(x).add(w).add(bias).add(y);
  k.add(p.stride.h).add(p.stride.w).add(p.padding.h).add(p.padding.w);
  k.add(p.dilation.h).add(p.dilation.w).add(p.groups);
  return k;
}

// Plain descriptors of a convolution's tensors (x / gx, w / gw, bias / gbias, y / gy).
struct ConvMds {
  memory::desc x, w, bias, y;
};

ConvMds plain_mds(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const Conv2dParams& p) {
  ConvMds m;
  m.x = onednn::plain_md(x.shape(), x.dtype());
  m.w = weights_md(w, p.groups, w.dtype());
  m.y = onednn::plain_md(y.shape(), y.dtype());
  if (bias.defined()) m.bias = onednn::plain_md(bias.shape(), bias.dtype());
  return m;
}

// The forward descriptor, on `any` layouts; also the hint of the backward ones.
dnnl::convolution_forward::primitive_desc forward_pd(const ConvMds& m, const Conv2dParams& p) {
  const Geometry g = geometry(p);
  const auto algo = dnnl::algorithm::convolution_direct;
  const auto kind = dnnl::prop_kind::forward_training;
  const memory::desc x = any_md(m.x), w = any_md(m.w), y = any_md(m.y);
  const auto desc =
      m.bias ? MIXGRAD_ONEDNN_CHECK(dnnl::convolution_forward::desc(kind, algo, x, w, m.bias, y, g.strides, g.dilates,
                                                                    g.pad_l, g.pad_r))
             : MIXGRAD_ONEDNN_CHECK(
                   dnnl::convolution_forward::desc(kind, algo, x, w, y, g.strides, g.dilates, g.pad_l, g.pad_r));
  onednn::count_primitive();
  return MIXGRAD_ONEDNN_CHECK(dnnl::convolution_forward::primitive_desc(desc, onednn::engine(), true));
}

struct ForwardEntry {
  dnnl::convolution_forward prim;
  LayoutArg x, w, y;
  memory::desc bias;
};

struct BackwardDataEntry {
  dnnl::convolution_backward_data prim;
  LayoutArg gy, w, gx;
};

struct BackwardWeightsEntry {
  dnnl::convolution_backward_weights prim;
  LayoutArg gy, x, gw;
  memory::desc gbias;
};

// Bias in a dtype oneDNN takes (bfloat16 convolutions take float32 bias too).
Tensor onednn_bias(const Tensor& bias) {
  if (!bias.defined() || onednn::native(bias.dtype())) return bias;
  return onednn::to_float32(bias);
}

bool onednn_forward(const Tensor& x, const Tensor& w, const Tensor& bias_in, const Tensor& y, const Conv2dParams& p) {
  if (y.dtype() == DType::float16) {
    Tensor y32 = empty(y.shape(), DType::float32, y.device());
    const Tensor b32 = bias_in.defined() ? onednn::to_float32(bias_in) : Tensor();
    if (!onednn_forward(onednn::to_float32(x), onednn::to_float32(w), b32, y32, p)) return false;
    copy(y32, y);
    return true;
  }
  if (!onednn::native(y.dtype())) return false;
  const Tensor bias = onednn_bias(bias_in);
  const auto e = onednn::cache<ForwardEntry>().find_or_make(
      conv_key(onednn::Family::conv_forward, x, w, bias, y, p), [&]() -> std::shared_ptr<ForwardEntry> {
        const ConvMds m = plain_mds(x, w, bias, y, p);
        const auto pd = forward_pd(m, p);
        if (!pd) return nullptr;
        auto e = std::make_shared<ForwardEntry>();
        e->prim = MIXGRAD_ONEDNN_CHECK(dnnl::convolution_forward(pd));
        e->x = onednn::layout_arg(m.x, pd.src_desc(), Direction::input);
        e->w = onednn::layout_arg(m.w, pd.weights_desc(), Direction::input);
        e->y = onednn::layout_arg(m.y, pd.dst_desc(), Direction::output);
        e->bias = m.bias;
        return e;
      });
  if (!e) return false;
  onednn::Execution run;
  run.input(DNNL_ARG_SRC, e->x, x);
  run.input(DNNL_ARG_WEIGHTS, e->w, w);
  if (bias.defined()) run.plain(DNNL_ARG_BIAS, e->bias, bias);
  run.output(DNNL_ARG_DST, e->y, y);
  run.run(e->prim);
  return true;
}

bool onednn_backward_data(const Tensor& gy, const Tensor& w, const Tensor& gx, const Conv2dParams& p) {
  if (gx.dtype() == DType::float16) {
    Tensor gx32 = empty(gx.shape(), DType::float32, gx.device());
    if (!onednn_backward_data(onednn::to_float32(gy), onednn::to_float32(w), gx32, p)) return false;
    copy(gx32, gx);
    return true;
  }
  if (!onednn::native(gx.dtype())) return false;
  const auto e = onednn::cache<BackwardDataEntry>().find_or_make(
      conv_key(onednn::Family::conv_backward_data, gx, w, Tensor(), gy, p),
      [&]() -> std::shared_ptr<BackwardDataEntry> {
        const ConvMds m = plain_mds(gx, w, Tensor(), gy, p);
        const auto hint = forward_pd(m, p);
        if (!hint) return nullptr;
        const Geometry g = geometry(p);
        const auto desc = MIXGRAD_ONEDNN_CHECK(
            dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, any_md(m.x), any_md(m.w),
                                                  any_md(m.y), g.strides, g.dilates, g.pad_l, g.pad_r));
        const auto pd =
            MIXGRAD_ONEDNN_CHECK(dnnl::convolution_backward_data::primitive_desc(desc, onednn::engine(), hint, true));
        if (!pd) return nullptr;
        auto e = std::make_shared<BackwardDataEntry>();
        e->prim = MIXGRAD_ONEDNN_CHECK(dnnl::convolution_backward_data(pd));
        e->gy = onednn::layout_arg(m.y, pd.diff_dst_desc(), Direction::input);
        e->w = onednn::layout_arg(m.w, pd.weights_desc(), Direction::input);
        e->gx = onednn::layout_arg(m.x, pd.diff_src_desc(), Direction::output);
        return e;
      });
  if (!e) return false;
  onednn::Execution run;
  run.input(DNNL_ARG_DIFF_DST, e->gy, gy);
  run.input(DNNL_ARG_WEIGHTS, e->w, w);
  run.output(DNNL_ARG_DIFF_SRC, e->gx, gx);
  run.run(e->prim);
  return true;
}

bool onednn_backward_weights(const Tensor& gy, const Tensor& x, const Tensor& gw, const Tensor& gb,
                             const Conv2dParams& p) {
  if (gw.dtype() == DType::float16) {
    Tensor gw32 = empty(gw.shape(), DType::float32, gw.device());
    Tensor gb32 = gb.defined() ? empty(gb.shape(), DType::float32, gb.device()) : Tensor();
    if (!onednn_backward_weights(onednn::to_float32(gy), onednn::to_float32(x), gw32, gb32, p)) return false;
    copy(gw32, gw);
    if (gb.defined()) copy(gb32, gb);
    return true;
  }
  if (!onednn::native(gw.dtype())) return false;
  // The bias gradient in float32 unless it is wanted in a dtype oneDNN writes.
  Tensor gb_out = gb.defined() && !onednn::native(gb.dtype()) ? empty(gb.shape(), DType::float32, gb.device()) : gb;
  const auto e = onednn::cache<BackwardWeightsEntry>().find_or_make(
      conv_key(onednn::Family::conv_backward_weights, x, gw, gb_out, gy, p),
      [&]() -> std::shared_ptr<BackwardWeightsEntry> {
        const ConvMds m = plain_mds(x, gw, gb_out, gy, p);
        const auto hint = forward_pd(m, p);
        if (!hint) return nullptr;
        const Geometry g = geometry(p);
        const auto algo = dnnl::algorithm::convolution_direct;
        const memory::desc xa = any_md(m.x), wa = any_md(m.w), ya = any_md(m.y);
        const auto desc = m.bias ? MIXGRAD_ONEDNN_CHECK(dnnl::convolution_backward_weights::desc(
                                       algo, xa, wa, m.bias, ya, g.strides, g.dilates, g.pad_l, g.pad_r))
                                 : MIXGRAD_ONEDNN_CHECK(dnnl::convolution_backward_weights::desc(
                                       algo, xa, wa, ya, g.strides, g.dilates, g.pad_l, g.pad_r));
        const auto pd = MIXGRAD_ONEDNN_CHECK(
            dnnl::convolution_backward_weights::primitive_desc(desc, onednn::engine(), hint, true));
        if (!pd) return nullptr;
        auto e = std::make_shared<BackwardWeightsEntry>();
        e->prim = MIXGRAD_ONEDNN_CHECK(dnnl::convolution_backward_weights(pd));
        e->gy = onednn::layout_arg(m.y, pd.diff_dst_desc(), Direction::input);
        e->x = onednn::layout_arg(m.x, pd.src_desc(), Direction::input);
        e->gw = onednn::layout_arg(m.w, pd.diff_weights_desc(), Direction::output);
        e->gbias = m.bias;
        return e;
      });
  if (!e) return false;
  onednn::Execution run;
  run.input(DNNL_ARG_DIFF_DST, e->gy, gy);
  run.input(DNNL_ARG_SRC, e->x, x);
  run.output(DNNL_ARG_DIFF_WEIGHTS, e->gw, gw);
  if (gb_out.defined()) run.plain(DNNL_ARG_DIFF_BIAS, e->gbias, gb_out);
  run.run(e->prim);
  if (gb_out.defined() && gb_out.impl() != gb.impl()) copy(gb_out, gb);
  return true;
}

#endif  // MIXGRAD_WITH_ONEDNN

// ---- built-in path: im2col + gemm -------------------------------------------

// col[(c*KH + kh)*KW + kw, oh*OW + ow] = x[c, oh*sh - ph + kh*dh, ow*sw - pw + kw*dw]
// (zero outside), for the cg channels of one group of one image.
template <class T, class Acc>
void im2col(const T* x, const ConvDims& d, const Conv2dParams& p, Acc* col) {
  const int64_t ohw = d.oh * d.ow;
  for (int64_t c = 0; c < d.cg; ++c)
    for (int64_t kh = 0; kh < d.kh; ++kh)
      for (int64_t kw = 0; kw < d.kw; ++kw) {
        Acc* row = col + ((c * d.kh + kh) * d.kw + kw) * ohw;
        for (int64_t oh = 0; oh < d.oh; ++oh) {
          const int64_t ih = oh * p.stride.h - p.padding.h + kh * p.dilation.h;
          Acc* out = row + oh * d.ow;
          if (ih < 0 || ih >= d.h) {
            std::fill(out, out + d.ow, Acc(0));
            continue;
          }
          const T* in = x + (c * d.h + ih) * d.w;
          for (int64_t ow = 0; ow < d.ow; ++ow) {
            const int64_t iw = ow * p.stride.w - p.padding.w + kw * p.dilation.w;
            out[ow] = iw >= 0 && iw < d.w ? kernels::cast<Acc>(in[iw]) : Acc(0);
          }
        }
      }
}

// The adjoint of im2col: gx[c, ih, iw] += col[...] for the cg channels of a group.
template <class Acc>
void col2im(const Acc* col, const ConvDims& d, const Conv2dParams& p, Acc* gx) {
  const int64_t ohw = d.oh * d.ow;
  for (int64_t c = 0; c < d.cg; ++c)
    for (int64_t kh = 0; kh < d.kh; ++kh)
      for (int64_t kw = 0; kw < d.kw; ++kw) {
        const Acc* row = col + ((c * d.kh + kh) * d.kw + kw) * ohw;
        for (int64_t oh = 0; oh < d.oh; ++oh) {
          const int64_t ih = oh * p.stride.h - p.padding.h + kh * p.dilation.h;
          if (ih < 0 || ih >= d.h) continue;
          Acc* out = gx + (c * d.h + ih) * d.w;
          for (int64_t ow = 0; ow < d.ow; ++ow) {
            const int64_t iw = ow * p.stride.w - p.padding.w + kw * p.dilation.w;
            if (iw >= 0 && iw < d.w) out[iw] += row[oh * d.ow + ow];
          }
        }
      }
}

template <class Acc>
std::vector<Acc> bias_values(const Tensor& bias) {
  std::vector<Acc> v;
  if (!bias.defined()) return v;
  const Tensor b = bias.contiguous();
  v.resize(static_cast<size_t>(b.numel()));
  visit_floating(b.dtype(), "conv2d", [&]<class B>() {
    const B* p = b.data<B>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = kernels::cast<Acc>(p[i]);
  });
  return v;
}

// Flops of one image's work, to decide whether the image loop goes parallel.
int64_t image_grain(const ConvDims& d) {
  const int64_t flops = std::max<int64_t>(1, d.o * d.ckk() * d.oh * d.ow);
  return std::max<int64_t>(1, (int64_t{1} << 17) / flops);
}

template <class T>
void fallback_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const Conv2dParams& p) {
  using Acc = kernels::compute_t<T>;
  const ConvDims d = conv_dims(x, w, y, p);
  const int64_t ohw = d.oh * d.ow;
  const std::vector<Acc> b = bias_values<Acc>(bias);
  const T* xp = static_cast<const T*>(x.raw_data());
  const T* wp = static_cast<const T*>(w.raw_data());
  T* yp = static_cast<T*>(y.raw_data());
  kernels::parallel_for(d.n, image_grain(d), [&](int64_t n0, int64_t n1) {
    std::vector<Acc> col(static_cast<size_t>(d.ckk() * ohw));
    std::vector<Acc> out(static_cast<size_t>(d.og * ohw));
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t g = 0; g < d.groups; ++g) {
        im2col(xp + (n * d.c + g * d.cg) * d.h * d.w, d, p, col.data());
        const fallback::MatView<T> wv{wp + g * d.og * d.ckk(), d.ckk(), 1};
        const fallback::MatView<Acc> cv{col.data(), ohw, 1};
        fallback::gemm<Acc>(d.og, ohw, d.ckk(), wv, cv, out.data(), ohw, OutputMode::overwrite);
        T* yg = yp + (n * d.o + g * d.og) * ohw;
        for (int64_t o = 0; o < d.og; ++o) {
          const Acc bo = b.empty() ? Acc(0) : b[g * d.og + o];
          for (int64_t i = 0; i < ohw; ++i) yg[o * ohw + i] = kernels::cast<T>(out[o * ohw + i] + bo);
        }
      }
  });
}

template <class T>
void fallback_backward_data(const Tensor& gy, const Tensor& w, const Tensor& gx, const Conv2dParams& p) {
  using Acc = kernels::compute_t<T>;
  const ConvDims d = conv_dims(gx, w, gy, p);
  const int64_t ohw = d.oh * d.ow, chw = d.c * d.h * d.w;
  const T* gyp = static_cast<const T*>(gy.raw_data());
  const T* wp = static_cast<const T*>(w.raw_data());
  T* gxp = static_cast<T*>(gx.raw_data());
  kernels::parallel_for(d.n, image_grain(d), [&](int64_t n0, int64_t n1) {
    std::vector<Acc> col(static_cast<size_t>(d.ckk() * ohw));
    std::vector<Acc> acc(static_cast<size_t>(chw));
    for (int64_t n = n0; n < n1; ++n) {
      std::fill(acc.begin(), acc.end(), Acc(0));
      for (int64_t g = 0; g < d.groups; ++g) {
        // col = W_gᵀ · gy_g: W_g is [og, ckk] row-major, read transposed.
        const fallback::MatView<T> wt{wp + g * d.og * d.ckk(), 1, d.ckk()};
        const fallback::MatView<T> gv{gyp + (n * d.o + g * d.og) * ohw, ohw, 1};
        fallback::gemm<Acc>(d.ckk(), ohw, d.og, wt, gv, col.data(), ohw, OutputMode::overwrite);
        col2im(col.data(), d, p, acc.data() + g * d.cg * d.h * d.w);
      }
      T* out = gxp + n * chw;
      for (int64_t i = 0; i < chw; ++i) out[i] = kernels::cast<T>(acc[i]);
    }
  });
}

template <class T>
void fallback_backward_weights(const Tensor& gy, const Tensor& x, const Tensor& gw, const Tensor& gb,
                               const Conv2dParams& p) {
  using Acc = kernels::compute_t<T>;
  const ConvDims d = conv_dims(x, gw, gy, p);
  const int64_t ohw = d.oh * d.ow;
  const T* gyp = static_cast<const T*>(gy.raw_data());
  const T* xp = static_cast<const T*>(x.raw_data());
  std::vector<Acc> gw_acc(static_cast<size_t>(d.o * d.ckk()), Acc(0));
  std::vector<Acc> gb_acc(static_cast<size_t>(d.o), Acc(0));
  std::mutex merge;
  // Images are split across threads, each summing into its own buffers.
  kernels::parallel_for(d.n, image_grain(d), [&](int64_t n0, int64_t n1) {
    std::vector<Acc> col(static_cast<size_t>(d.ckk() * ohw));
    std::vector<Acc> part_w(gw_acc.size(), Acc(0));
    std::vector<Acc> part_b(gb_acc.size(), Acc(0));
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t g = 0; g < d.groups; ++g) {
        im2col(xp + (n * d.c + g * d.cg) * d.h * d.w, d, p, col.data());
        // gw_g += gy_g · colᵀ
        const fallback::MatView<T> gv{gyp + (n * d.o + g * d.og) * ohw, ohw, 1};
        const fallback::MatView<Acc> ct{col.data(), 1, ohw};
        fallback::gemm<Acc>(d.og, d.ckk(), ohw, gv, ct, part_w.data() + g * d.og * d.ckk(), d.ckk(),
                            OutputMode::accumulate);
        if (gb.defined())
          for (int64_t o = 0; o < d.og; ++o) {
            Acc s = 0;
            for (int64_t i = 0; i < ohw; ++i) s += kernels::cast<Acc>(gv.p[o * ohw + i]);
            part_b[g * d.og + o] += s;
          }
      }
    std::lock_guard lock(merge);
    for (size_t i = 0; i < gw_acc.size(); ++i) gw_acc[i] += part_w[i];
    for (size_t i = 0; i < gb_acc.size(); ++i) gb_acc[i] += part_b[i];
  });
  auto store = [](const std::vector<Acc>& v, const Tensor& dst) {
    Tensor src = empty(dst.shape(), dtype_of<Acc>(), dst.device());
    std::copy(v.begin(), v.end(), static_cast<Acc*>(src.raw_data()));
    copy(src, dst);
  };
  store(gw_acc, gw);
  if (gb.defined()) store(gb_acc, gb);
}

// Multiply-adds of one convolution: every output takes C/groups * KH * KW.
[[maybe_unused]] int64_t work(const Tensor& w, const Tensor& y) {
  return y.numel() * w.shape()[1] * w.shape()[2] * w.shape()[3];
}

}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const Conv2dParams& p) {
  if (y.numel() == 0) return;
#if MIXGRAD_WITH_ONEDNN
  if (x.numel() > 0 && onednn::use_for(work(w, y)) && onednn_forward(x, w, bias, y, p)) return;
#endif
  visit_floating(y.dtype(), "conv2d", [&]<class T>() { fallback_forward<T>(x, w, bias, y, p); });
}

void conv2d_backward_data(const Tensor& gy, const Tensor& w, const Tensor& gx, const Conv2dParams& p) {
  if (gx.numel() == 0) return;
#if MIXGRAD_WITH_ONEDNN
  if (gy.numel() > 0 && onednn::use_for(work(w, gy)) && onednn_backward_data(gy, w, gx, p)) return;
#endif
  visit_floating(gx.dtype(), "conv2d", [&]<class T>() { fallback_backward_data<T>(gy, w, gx, p); });
}

void conv2d_backward_weights(const Tensor& gy, const Tensor& x, const Tensor& gw, const Tensor& gbias,
                             const Conv2dParams& p) {
  if (gw.numel() == 0) return;
#if MIXGRAD_WITH_ONEDNN
  if (gy.numel() > 0 && onednn::use_for(work(gw, gy)) && onednn_backward_weights(gy, x, gw, gbias, p)) return;
#endif
  visit_floating(gw.dtype(), "conv2d", [&]<class T>() { fallback_backward_weights<T>(gy, x, gw, gbias, p); });
}

}  // namespace mixgrad::backend::cpu
