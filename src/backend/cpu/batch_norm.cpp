// CPU batch normalization. oneDNN for float32 and bfloat16 input (statistics,
// scale and shift in float32), float16 by way of float32; per-channel loops
// in the statistics type (float, or double for float64) otherwise. The data is
// viewed as [N, C, S] with S the product of the spatial dims, which oneDNN
// takes as a 4-d [N, C, S, 1] tensor whatever the input's rank.
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/batch_norm.hpp"
#include "backend/copy.hpp"
#include "backend/onednn/onednn.hpp"
#include "kernels/cast.hpp"
#include "kernels/loops.hpp"

#if MIXGRAD_WITH_ONEDNN
#include "backend/onednn/common.hpp"
#endif

namespace mixgrad::backend::cpu {

namespace {

struct NCS {
  int64_t n, c, s;
};
NCS ncs(const Tensor& x) {
  const int64_t n = x.shape()[0], c = x.shape()[1];
  return {n, c, n * c == 0 ? 0 : x.numel() / (n * c)};
}

#if MIXGRAD_WITH_ONEDNN

using dnnl::memory;
using dnnl::normalization_flags;

normalization_flags flags_of(bool scale, bool shift, bool global_stats) {
  auto f = static_cast<normalization_flags>(0);
  if (scale) f |= normalization_flags::use_scale;
  if (shift) f |= normalization_flags::use_shift;
  if (global_stats) f |= normalization_flags::use_global_stats;
  return f;
}

memory::desc data_md(const Tensor& x, DType dt) {
  const NCS d = ncs(x);
  return onednn::plain_md(Shape{d.n, d.c, d.s, 1}, dt);
}

int64_t eps_bits(double eps) {
  int64_t b;
  std::memcpy(&b, &eps, sizeof b);
  return b;
}

onednn::Key bn_key(onednn::Family f, const Tensor& x, DType dt, normalization_flags flags, double eps, int64_t prop) {
  const NCS d = ncs(x);
  onednn::Key k(f);
  k.add(d.n).add(d.c).add(d.s).add(static_cast<int64_t>(dt));
  k.add(static_cast<int64_t>(flags)).add(eps_bits(eps)).add(prop);
  return k;
}

dnnl::batch_normalization_forward::primitive_desc forward_pd(dnnl::prop_kind kind, const memory::desc& data,
                                                             double eps, normalization_flags flags) {
  const auto desc =
      MIXGRAD_ONEDNN_CHECK(dnnl::batch_normalization_forward::desc(kind, data, static_cast<float>(eps), flags));
  onednn::count_primitive();
  return MIXGRAD_ONEDNN_CHECK(dnnl::batch_normalization_forward::primitive_desc(desc, onednn::engine(), true));
}

struct ForwardEntry {
  dnnl::batch_normalization_forward prim;
  memory::desc data, stat;
};

struct BackwardEntry {
  dnnl::batch_normalization_backward prim;
  memory::desc data, stat;
};

bool onednn_forward(const BatchNormForward& a) {
  if (a.mean.dtype() != DType::float32) return false;
  if (a.x.dtype() == DType::float16) {
    BatchNormForward b = a;
    b.x = onednn::to_float32(a.x);
    b.y = empty(a.y.shape(), DType::float32, a.y.device());
    if (!onednn_forward(b)) return false;
    copy(b.y, a.y);
    return true;
  }
  if (!onednn::native(a.x.dtype())) return false;
  const auto flags = flags_of(a.weight.defined(), a.bias.defined(), !a.training);
  const auto kind = a.training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  const auto e = onednn::cache<ForwardEntry>().find_or_make(
      bn_key(onednn::Family::batch_norm_forward, a.x, a.x.dtype(), flags, a.eps, static_cast<int64_t>(kind)),
      [&]() -> std::shared_ptr<ForwardEntry> {
        auto e = std::make_shared<ForwardEntry>();
        e->data = data_md(a.x, a.x.dtype());
        e->stat = onednn::plain_md(Shape{a.x.shape()[1]}, DType::float32);
        const auto pd = forward_pd(kind, e->data, a.eps, flags);
        if (!pd) return nullptr;
        e->prim = MIXGRAD_ONEDNN_CHECK(dnnl::batch_normalization_forward(pd));
        return e;
      });
  if (!e) return false;
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, onednn::memory(e->data, a.x)},
                                       {DNNL_ARG_DST, onednn::memory(e->data, a.y)},
                                       {DNNL_ARG_MEAN, onednn::memory(e->stat, a.mean)},
                                       {DNNL_ARG_VARIANCE, onednn::memory(e->stat, a.var)}};
  if (a.weight.defined()) args.emplace(DNNL_ARG_SCALE, onednn::memory(e->stat, a.weight));
  if (a.bias.defined()) args.emplace(DNNL_ARG_SHIFT, onednn::memory(e->stat, a.bias));
  onednn::execute(e->prim, args);
  return true;
}

bool onednn_backward(const BatchNormBackward& a) {
  if (a.mean.dtype() != DType::float32) return false;
  const DType dt = a.x.dtype();
  if (dt == DType::float16) {
    BatchNormBackward b = a;
    b.x = onednn::to_float32(a.x);
    b.grad_y = onednn::to_float32(a.grad_y);
    b.grad_x = a.grad_x.defined() ? empty(a.grad_x.shape(), DType::float32, a.grad_x.device()) : Tensor();
    if (!onednn_backward(b)) return false;
    if (a.grad_x.defined()) copy(b.grad_x, a.grad_x);
    return true;
  }
  if (!onednn::native(dt)) return false;
  const bool scale = a.weight.defined();
  // The shift's gradient comes with use_shift; the forward's shift value does not matter here.
  const bool shift = a.grad_bias.defined();
  const bool params_wanted = a.grad_weight.defined() || a.grad_bias.defined();
  const auto kind = params_wanted ? dnnl::prop_kind::backward : dnnl::prop_kind::backward_data;
  const auto flags = flags_of(scale, shift && params_wanted, !a.training);
  const auto e = onednn::cache<BackwardEntry>().find_or_make(
      bn_key(onednn::Family::batch_norm_backward, a.x, dt, flags, a.eps, static_cast<int64_t>(kind)),
      [&]() -> std::shared_ptr<BackwardEntry> {
        auto e = std::make_shared<BackwardEntry>();
        e->data = data_md(a.x, dt);
        e->stat = onednn::plain_md(Shape{a.x.shape()[1]}, DType::float32);
        const auto hint = forward_pd(dnnl::prop_kind::forward_training, e->data, a.eps, flags);
        if (!hint) return nullptr;
        const auto desc = MIXGRAD_ONEDNN_CHECK(
            dnnl::batch_normalization_backward::desc(kind, e->data, e->data, static_cast<float>(a.eps), flags));
        const auto pd = MIXGRAD_ONEDNN_CHECK(
            dnnl::batch_normalization_backward::primitive_desc(desc, onednn::engine(), hint, true));
        if (!pd) return nullptr;
        e->prim = MIXGRAD_ONEDNN_CHECK(dnnl::batch_normalization_backward(pd));
        return e;
      });
  if (!e) return false;
  const Tensor gx = a.grad_x.defined() ? a.grad_x : empty(a.x.shape(), dt, a.x.device());
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, onednn::memory(e->data, a.x)},
                                       {DNNL_ARG_DIFF_DST, onednn::memory(e->data, a.grad_y)},
                                       {DNNL_ARG_DIFF_SRC, onednn::memory(e->data, gx)},
                                       {DNNL_ARG_MEAN, onednn::memory(e->stat, a.mean)},
                                       {DNNL_ARG_VARIANCE, onednn::memory(e->stat, a.var)}};
  Tensor gw = a.grad_weight, gb = a.grad_bias;
  if (scale) {
    args.emplace(DNNL_ARG_SCALE, onednn::memory(e->stat, a.weight));
    if (params_wanted) {
      if (!gw.defined()) gw = empty(Shape{a.x.shape()[1]}, DType::float32, a.x.device());
      args.emplace(DNNL_ARG_DIFF_SCALE, onednn::memory(e->stat, gw));
    }
  }
  Tensor shift_value;
  if (shift && params_wanted) {
    // oneDNN asks for the shift as an input even though its gradient does not depend on it.
    shift_value = empty(Shape{a.x.shape()[1]}, DType::float32, a.x.device());
    fill(shift_value, 0.0);
    args.emplace(DNNL_ARG_SHIFT, onednn::memory(e->stat, shift_value));
    args.emplace(DNNL_ARG_DIFF_SHIFT, onednn::memory(e->stat, gb));
  }
  onednn::execute(e->prim, args);
  if (a.grad_weight.defined() && !scale) fill(a.grad_weight, 0.0);  // no weight: nothing to differentiate
  return true;
}

#endif  // MIXGRAD_WITH_ONEDNN

// ---- built-in path ------------------------------------------------------------

template <class S>
const S* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const S*>(t.raw_data()) : nullptr;
}

int64_t channel_grain(const NCS& d) {
  return std::max<int64_t>(1, kernels::kParallelGrain / std::max<int64_t>(1, d.n * d.s));
}

template <class T, class S>
void fallback_forward(const BatchNormForward& a) {
  const NCS d = ncs(a.x);
  const T* x = static_cast<const T*>(a.x.raw_data());
  T* y = static_cast<T*>(a.y.raw_data());
  S* mean = static_cast<S*>(a.mean.raw_data());
  S* var = static_cast<S*>(a.var.raw_data());
  const S* w = ptr_or_null<S>(a.weight);
  const S* b = ptr_or_null<S>(a.bias);
  const S count = static_cast<S>(d.n * d.s);
  kernels::parallel_for(d.c, channel_grain(d), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      if (a.training) {
        S sum = 0;
        for (int64_t n = 0; n < d.n; ++n) {
          const T* p = x + (n * d.c + c) * d.s;
          for (int64_t i = 0; i < d.s; ++i) sum += kernels::cast<S>(p[i]);
        }
        const S m = count > 0 ? sum / count : S(0);
        S sq = 0;  // second pass: no cancellation from E[x²] - E[x]²
        for (int64_t n = 0; n < d.n; ++n) {
          const T* p = x + (n * d.c + c) * d.s;
          for (int64_t i = 0; i < d.s; ++i) {
            const S dv = kernels::cast<S>(p[i]) - m;
            sq += dv * dv;
          }
        }
        mean[c] = m;
        var[c] = count > 0 ? sq / count : S(0);
      }
      const S rstd = S(1) / std::sqrt(var[c] + static_cast<S>(a.eps));
      const S scale = (w ? w[c] : S(1)) * rstd;
      const S shift = (b ? b[c] : S(0)) - mean[c] * scale;
      for (int64_t n = 0; n < d.n; ++n) {
        const T* p = x + (n * d.c + c) * d.s;
        T* q = y + (n * d.c + c) * d.s;
        for (int64_t i = 0; i < d.s; ++i) q[i] = kernels::cast<T>(kernels::cast<S>(p[i]) * scale + shift);
      }
    }
  });
}

template <class T, class S>
void fallback_backward(const BatchNormBackward& a) {
  const NCS d = ncs(a.x);
  const T* x = static_cast<const T*>(a.x.raw_data());
  const T* gy = static_cast<const T*>(a.grad_y.raw_data());
  T* gx = a.grad_x.defined() ? static_cast<T*>(a.grad_x.raw_data()) : nullptr;
  const S* mean = static_cast<const S*>(a.mean.raw_data());
  const S* var = static_cast<const S*>(a.var.raw_data());
  const S* w = ptr_or_null<S>(a.weight);
  S* gw = a.grad_weight.defined() ? static_cast<S*>(a.grad_weight.raw_data()) : nullptr;
  S* gb = a.grad_bias.defined() ? static_cast<S*>(a.grad_bias.raw_data()) : nullptr;
  const S count = static_cast<S>(d.n * d.s);
  kernels::parallel_for(d.c, channel_grain(d), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const S m = mean[c];
      const S rstd = S(1) / std::sqrt(var[c] + static_cast<S>(a.eps));
      S sum_dy = 0, sum_dy_xhat = 0;
      for (int64_t n = 0; n < d.n; ++n) {
        const T* p = x + (n * d.c + c) * d.s;
        const T* g = gy + (n * d.c + c) * d.s;
        for (int64_t i = 0; i < d.s; ++i) {
          const S gv = kernels::cast<S>(g[i]);
          sum_dy += gv;
          sum_dy_xhat += gv * (kernels::cast<S>(p[i]) - m) * rstd;
        }
      }
      if (gw) gw[c] = w ? sum_dy_xhat : S(0);
      if (gb) gb[c] = sum_dy;
      if (!gx) continue;
      const S scale = (w ? w[c] : S(1)) * rstd;
      // Training: the batch statistics depend on x, which removes the mean
      // of the gradient and its projection on x̂.
      const S mean_dy = a.training && count > 0 ? sum_dy / count : S(0);
      const S mean_dy_xhat = a.training && count > 0 ? sum_dy_xhat / count : S(0);
      for (int64_t n = 0; n < d.n; ++n) {
        const T* p = x + (n * d.c + c) * d.s;
        const T* g = gy + (n * d.c + c) * d.s;
        T* q = gx + (n * d.c + c) * d.s;
        for (int64_t i = 0; i < d.s; ++i) {
          const S xhat = (kernels::cast<S>(p[i]) - m) * rstd;
          q[i] = kernels::cast<T>(scale * (kernels::cast<S>(g[i]) - mean_dy - xhat * mean_dy_xhat));
        }
      }
    }
  });
}

template <class F>
void visit_stats(DType x, DType stats, F&& f) {
  visit_floating(x, "batch_norm", [&]<class T>() {
    if (stats == DType::float64) {
      f.template operator()<T, double>();
    } else {
      f.template operator()<T, float>();
    }
  });
}

}  // namespace

void batch_norm_forward(const BatchNormForward& a) {
#if MIXGRAD_WITH_ONEDNN
  if (a.x.numel() > 0 && onednn::use_for(a.x.numel()) && onednn_forward(a)) return;
#endif
  visit_stats(a.x.dtype(), a.mean.dtype(), [&]<class T, class S>() { fallback_forward<T, S>(a); });
}

void batch_norm_backward(const BatchNormBackward& a) {
#if MIXGRAD_WITH_ONEDNN
  if (a.x.numel() > 0 && onednn::use_for(a.x.numel()) && onednn_backward(a)) return;
#endif
  visit_stats(a.x.dtype(), a.mean.dtype(), [&]<class T, class S>() { fallback_backward<T, S>(a); });
}

}  // namespace mixgrad::backend::cpu
