// CPU 2-d convolution: the choice between oneDNN (backend/onednn/conv.cpp)
// for float32 and bfloat16 (float16 by way of float32) and the built-in path
// here (im2col + gemm, accumulating in float / double), which runs float64,
// tiny problems, configurations oneDNN lacks and builds without oneDNN.
#include <algorithm>
#include <mutex>
#include <vector>

#include "backend/conv.hpp"
#include "backend/copy.hpp"
#include "backend/cpu/float32_route.hpp"
#include "backend/cpu/gemm.hpp"
#include "backend/onednn/conv.hpp"
#include "backend/onednn/onednn.hpp"
#include "backend/reduction.hpp"
#include "kernels/cast.hpp"
#include "kernels/loops.hpp"

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
    copy_kernel(src, dst);
  };
  store(gw_acc, gw);
  if (gb.defined()) store(gb_acc, gb);
}

// Multiply-adds of one convolution: every output takes C/groups * KH * KW.
[[maybe_unused]] int64_t work(const Tensor& w, const Tensor& y) {
  return y.numel() * w.shape()[1] * w.shape()[2] * w.shape()[3];
}

// Operands of mixed dtypes: autocast's float32 weights (or inputs) beside
// 16-bit activations, on a CPU without 16-bit math. oneDNN takes them as
// they are (its reorders widen the 16-bit ones into its float32 layouts);
// the built-in kernels take the float32 route (cpu/float32_route.hpp).
bool mixed(const Tensor& a, const Tensor& b, const Tensor& out) {
  return a.dtype() != out.dtype() || b.dtype() != out.dtype();
}

// The built-in kernels read and write contiguous NCHW: channels-last
// operands (which oneDNN takes as they lie) go through contiguous copies.
Tensor nchw(const Tensor& t) {
  if (!t.defined() || t.is_contiguous()) return t;
  Tensor c = empty(t.shape(), t.dtype(), t.device());
  copy_kernel(t, c);
  return c;
}

template <class Run>
void into_nchw(const Tensor& out, Run&& run) {
  if (out.is_contiguous()) return run(out);
  Tensor c = empty(out.shape(), out.dtype(), out.device());
  run(c);
  copy_kernel(c, out);
}

void builtin_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const Conv2dParams& p) {
  if (mixed(x, w, y))
    return into_float32(y, [&](const Tensor& y32) {
      fallback_forward<float>(widened(x), widened(w), bias, y32, p);
    });
  visit_floating(y.dtype(), "conv2d", [&]<class T>() { fallback_forward<T>(x, w, bias, y, p); });
}

void builtin_backward_data(const Tensor& gy, const Tensor& w, const Tensor& gx, const Conv2dParams& p) {
  if (mixed(gy, w, gx))
    return into_float32(gx, [&](const Tensor& gx32) {
      fallback_backward_data<float>(widened(gy), widened(w), gx32, p);
    });
  visit_floating(gx.dtype(), "conv2d", [&]<class T>() { fallback_backward_data<T>(gy, w, gx, p); });
}

void builtin_backward_weights(const Tensor& gy, const Tensor& x, const Tensor& gw, const Tensor& gbias,
                              const Conv2dParams& p) {
  if (mixed(gy, x, gw))
    return into_float32(gw, [&](const Tensor& gw32) {
      fallback_backward_weights<float>(widened(gy), widened(x), gw32, gbias, p);
    });
  visit_floating(gw.dtype(), "conv2d", [&]<class T>() { fallback_backward_weights<T>(gy, x, gw, gbias, p); });
}

}  // namespace

void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const Conv2dParams& p) {
  if (y.numel() == 0) return;
#if MIXGRAD_WITH_ONEDNN
  if (x.numel() > 0 && onednn::use_for(work(w, y)) && onednn::conv2d_forward(x, w, bias, y, p)) return;
#endif
  into_nchw(y, [&](const Tensor& yc) { builtin_forward(nchw(x), nchw(w), bias, yc, p); });
}

void conv2d_backward_data(const Tensor& gy, const Tensor& w, const Tensor& gx, const Conv2dParams& p) {
  if (gx.numel() == 0) return;
#if MIXGRAD_WITH_ONEDNN
  if (gy.numel() > 0 && onednn::use_for(work(w, gy)) && onednn::conv2d_backward_data(gy, w, gx, p)) return;
#endif
  into_nchw(gx, [&](const Tensor& gxc) { builtin_backward_data(nchw(gy), nchw(w), gxc, p); });
}

void conv2d_backward_weights(const Tensor& gy, const Tensor& x, const Tensor& gw, const Tensor& gbias,
                             const Conv2dParams& p) {
  if (gw.numel() == 0) {  // no weights (no input channels): the bias still gets dy summed per channel
    if (gbias.defined())
      backend::sum_channels(nchw(gy), gy.shape()[0], gy.shape()[1], gy.shape()[2] * gy.shape()[3], gbias);
    return;
  }
#if MIXGRAD_WITH_ONEDNN
  if (gy.numel() > 0 && onednn::use_for(work(gw, gy)) && onednn::conv2d_backward_weights(gy, x, gw, gbias, p))
    return;
#endif
  into_nchw(gw, [&](const Tensor& gwc) { builtin_backward_weights(nchw(gy), nchw(x), gwc, gbias, p); });
}

}  // namespace mixgrad::backend::cpu

namespace mixgrad::backend {

MIXGRAD_CPU_KERNEL(conv2d_forward, cpu::conv2d_forward);
MIXGRAD_CPU_KERNEL(conv2d_backward_data, cpu::conv2d_backward_data);
MIXGRAD_CPU_KERNEL(conv2d_backward_weights, cpu::conv2d_backward_weights);

}  // namespace mixgrad::backend
