// CPU softmax / log_softmax. oneDNN softmax_v2 (accurate, log) along the
// last dim (inner == 1) for float32 and bfloat16, float16 by way of float32;
// loops otherwise: oneDNN 2.6 has only its reference kernel for a softmax
// over a strided axis, slower than the loops here. The loops handle a whole [axis, inner] slab at a
// time so that the inner dimension, contiguous in memory, is the vectorised one.
// Without trapping math GCC computes both arms of exp_float's clamps and
// vectorises the built-in loops (see cpu/elementwise.cpp). Scoped to this
// file; it precedes the includes so the templates instantiated here get it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <cmath>
#include <limits>
#include <vector>

#include "backend/copy.hpp"
#include "backend/cpu/isa_variants.hpp"
#include "backend/onednn/onednn.hpp"
#include "backend/softmax.hpp"
#include "kernels/cast.hpp"
#include "kernels/loops.hpp"
#include "kernels/value_math.hpp"

#if MIXGRAD_WITH_ONEDNN
#include "backend/onednn/common.hpp"
#endif

namespace mixgrad::backend::cpu {

namespace {

#if MIXGRAD_WITH_ONEDNN

using dnnl::memory;

dnnl::algorithm algorithm_of(SoftmaxKind kind) {
  return kind == SoftmaxKind::log_softmax ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate;
}

onednn::Key softmax_key(onednn::Family f, const SoftmaxShape& s, DType dt, SoftmaxKind kind) {
  onednn::Key k(f);
  k.add(s.outer).add(s.axis).add(s.inner).add(static_cast<int64_t>(dt)).add(static_cast<int64_t>(kind));
  return k;
}

memory::desc view_md(const SoftmaxShape& s, DType dt) { return onednn::plain_md(Shape{s.outer, s.axis, s.inner}, dt); }

dnnl::softmax_v2_forward::primitive_desc forward_pd(const memory::desc& md, SoftmaxKind kind) {
  const auto desc = MIXGRAD_ONEDNN_CHECK(
      dnnl::softmax_v2_forward::desc(dnnl::prop_kind::forward_training, algorithm_of(kind), md, md, 1));
  onednn::count_primitive();
  return MIXGRAD_ONEDNN_CHECK(dnnl::softmax_v2_forward::primitive_desc(desc, onednn::engine(), true));
}

struct ForwardEntry {
  dnnl::softmax_v2_forward prim;
  memory::desc md;
};

struct BackwardEntry {
  dnnl::softmax_v2_backward prim;
  memory::desc md;
};

bool onednn_forward(const Tensor& x, const Tensor& y, const SoftmaxShape& s, SoftmaxKind kind) {
  if (y.dtype() == DType::float16) {
    Tensor y32 = empty(y.shape(), DType::float32, y.device());
    if (!onednn_forward(onednn::to_float32(x), y32, s, kind)) return false;
    copy_kernel(y32, y);
    return true;
  }
  if (!onednn::native(y.dtype())) return false;
  const auto e = onednn::cache<ForwardEntry>().find_or_make(
      softmax_key(onednn::Family::softmax_forward, s, y.dtype(), kind), [&]() -> std::shared_ptr<ForwardEntry> {
        auto e = std::make_shared<ForwardEntry>();
        e->md = view_md(s, y.dtype());
        const auto pd = forward_pd(e->md, kind);
        if (!pd) return nullptr;
        e->prim = MIXGRAD_ONEDNN_CHECK(dnnl::softmax_v2_forward(pd));
        return e;
      });
  if (!e) return false;
  onednn::execute(e->prim, {{DNNL_ARG_SRC, onednn::memory(e->md, x)}, {DNNL_ARG_DST, onednn::memory(e->md, y)}});
  return true;
}

bool onednn_backward(const Tensor& gy, const Tensor& y, const Tensor& gx, const SoftmaxShape& s, SoftmaxKind kind) {
  if (gx.dtype() == DType::float16) {
    Tensor gx32 = empty(gx.shape(), DType::float32, gx.device());
    if (!onednn_backward(onednn::to_float32(gy), onednn::to_float32(y), gx32, s, kind)) return false;
    copy_kernel(gx32, gx);
    return true;
  }
  if (!onednn::native(gx.dtype())) return false;
  const auto e = onednn::cache<BackwardEntry>().find_or_make(
      softmax_key(onednn::Family::softmax_backward, s, gx.dtype(), kind), [&]() -> std::shared_ptr<BackwardEntry> {
        auto e = std::make_shared<BackwardEntry>();
        e->md = view_md(s, gx.dtype());
        const auto hint = forward_pd(e->md, kind);
        if (!hint) return nullptr;
        const auto desc =
            MIXGRAD_ONEDNN_CHECK(dnnl::softmax_v2_backward::desc(algorithm_of(kind), e->md, e->md, e->md, 1));
        const auto pd =
            MIXGRAD_ONEDNN_CHECK(dnnl::softmax_v2_backward::primitive_desc(desc, onednn::engine(), hint, true));
        if (!pd) return nullptr;
        e->prim = MIXGRAD_ONEDNN_CHECK(dnnl::softmax_v2_backward(pd));
        return e;
      });
  if (!e) return false;
  onednn::execute(e->prim, {{DNNL_ARG_DST, onednn::memory(e->md, y)},
                            {DNNL_ARG_DIFF_DST, onednn::memory(e->md, gy)},
                            {DNNL_ARG_DIFF_SRC, onednn::memory(e->md, gx)}});
  return true;
}

#endif  // MIXGRAD_WITH_ONEDNN

// ---- built-in path ------------------------------------------------------------

int64_t slab_grain(const SoftmaxShape& s) {
  return std::max<int64_t>(1, kernels::kParallelGrain / std::max<int64_t>(1, s.axis * s.inner));
}

// The loops over slabs [o0, o1) of [axis, inner], as jobs of isa::RunJob:
// compiled at each ISA level, so the inner loops vectorise at the CPU's
// width (kernels::math::exp is exp_float in float, inlined). `mx`, `sum`
// and `dot` are a thread's [inner] scratch.
template <class T>
struct ForwardSlabs {
  using Acc = kernels::compute_t<T>;
  const T* xp;
  T* yp;
  int64_t axis, inner;
  SoftmaxKind kind;

  [[gnu::always_inline]] void run(int64_t o0, int64_t o1, Acc* mx, Acc* sum) const {
    for (int64_t o = o0; o < o1; ++o) {
      const T* in = xp + o * axis * inner;
      T* out = yp + o * axis * inner;
      std::fill(mx, mx + inner, -std::numeric_limits<Acc>::infinity());
      std::fill(sum, sum + inner, Acc(0));
      for (int64_t a = 0; a < axis; ++a) {
        const T* row = in + a * inner;
        for (int64_t i = 0; i < inner; ++i) mx[i] = std::max(mx[i], kernels::cast<Acc>(row[i]));
      }
      // An all -inf slice has max -inf; shifting by 0 instead keeps it NaN-free where defined.
      for (int64_t i = 0; i < inner; ++i)
        if (std::isinf(mx[i])) mx[i] = 0;
      for (int64_t a = 0; a < axis; ++a) {
        const T* row = in + a * inner;
        for (int64_t i = 0; i < inner; ++i) sum[i] += kernels::math::exp(kernels::cast<Acc>(row[i]) - mx[i]);
      }
      if (kind == SoftmaxKind::softmax) {
        for (int64_t i = 0; i < inner; ++i) sum[i] = Acc(1) / sum[i];
        for (int64_t a = 0; a < axis; ++a) {
          const T* row = in + a * inner;
          T* dst = out + a * inner;
          for (int64_t i = 0; i < inner; ++i)
            dst[i] = kernels::cast<T>(kernels::math::exp(kernels::cast<Acc>(row[i]) - mx[i]) * sum[i]);
        }
      } else {
        for (int64_t i = 0; i < inner; ++i) sum[i] = mx[i] + std::log(sum[i]);
        for (int64_t a = 0; a < axis; ++a) {
          const T* row = in + a * inner;
          T* dst = out + a * inner;
          for (int64_t i = 0; i < inner; ++i) dst[i] = kernels::cast<T>(kernels::cast<Acc>(row[i]) - sum[i]);
        }
      }
    }
  }
};

template <class T>
struct BackwardSlabs {
  using Acc = kernels::compute_t<T>;
  const T* gp;
  const T* yp;
  T* gx;
  int64_t axis, inner;
  SoftmaxKind kind;

  [[gnu::always_inline]] void run(int64_t o0, int64_t o1, Acc* dot) const {
    for (int64_t o = o0; o < o1; ++o) {
      const int64_t base = o * axis * inner;
      const T* g = gp + base;
      const T* y = yp + base;
      T* out = gx + base;
      std::fill(dot, dot + inner, Acc(0));
      if (kind == SoftmaxKind::softmax) {
        for (int64_t a = 0; a < axis; ++a)
          for (int64_t i = 0; i < inner; ++i)
            dot[i] += kernels::cast<Acc>(g[a * inner + i]) * kernels::cast<Acc>(y[a * inner + i]);
        for (int64_t a = 0; a < axis; ++a)
          for (int64_t i = 0; i < inner; ++i) {
            const int64_t k = a * inner + i;
            out[k] = kernels::cast<T>(kernels::cast<Acc>(y[k]) * (kernels::cast<Acc>(g[k]) - dot[i]));
          }
      } else {
        for (int64_t a = 0; a < axis; ++a)
          for (int64_t i = 0; i < inner; ++i) dot[i] += kernels::cast<Acc>(g[a * inner + i]);
        for (int64_t a = 0; a < axis; ++a)
          for (int64_t i = 0; i < inner; ++i) {
            const int64_t k = a * inner + i;
            out[k] = kernels::cast<T>(kernels::cast<Acc>(g[k]) - kernels::math::exp(kernels::cast<Acc>(y[k])) * dot[i]);
          }
      }
    }
  }
};

template <class T>
void fallback_forward(const Tensor& x, const Tensor& y, const SoftmaxShape& s, SoftmaxKind kind) {
  using Acc = kernels::compute_t<T>;
  const ForwardSlabs<T> job{static_cast<const T*>(x.raw_data()), static_cast<T*>(y.raw_data()), s.axis, s.inner, kind};
  const auto run = isa::variant<isa::RunJob, const ForwardSlabs<T>&, int64_t, int64_t, Acc*, Acc*>();
  kernels::parallel_for(s.outer, slab_grain(s), [&](int64_t o0, int64_t o1) {
    std::vector<Acc> mx(static_cast<size_t>(s.inner)), sum(static_cast<size_t>(s.inner));
    run({}, job, o0, o1, mx.data(), sum.data());
  });
}

template <class T>
void fallback_backward(const Tensor& gy, const Tensor& y, const Tensor& gx, const SoftmaxShape& s, SoftmaxKind kind) {
  using Acc = kernels::compute_t<T>;
  const BackwardSlabs<T> job{static_cast<const T*>(gy.raw_data()), static_cast<const T*>(y.raw_data()),
                             static_cast<T*>(gx.raw_data()), s.axis, s.inner, kind};
  const auto run = isa::variant<isa::RunJob, const BackwardSlabs<T>&, int64_t, int64_t, Acc*>();
  kernels::parallel_for(s.outer, slab_grain(s), [&](int64_t o0, int64_t o1) {
    std::vector<Acc> dot(static_cast<size_t>(s.inner));
    run({}, job, o0, o1, dot.data());
  });
}

}  // namespace

void softmax_forward(const Tensor& x, const Tensor& y, const SoftmaxShape& s, SoftmaxKind kind) {
  if (y.numel() == 0) return;
#if MIXGRAD_WITH_ONEDNN
  if (s.inner == 1 && onednn::use_for(y.numel()) && onednn_forward(x, y, s, kind)) return;
#endif
  visit_floating(y.dtype(), "softmax", [&]<class T>() { fallback_forward<T>(x, y, s, kind); });
}

void softmax_backward(const Tensor& gy, const Tensor& y, const Tensor& gx, const SoftmaxShape& s, SoftmaxKind kind) {
  if (gx.numel() == 0) return;
#if MIXGRAD_WITH_ONEDNN
  if (s.inner == 1 && onednn::use_for(gx.numel()) && onednn_backward(gy, y, gx, s, kind)) return;
#endif
  visit_floating(gx.dtype(), "softmax", [&]<class T>() { fallback_backward<T>(gy, y, gx, s, kind); });
}

}  // namespace mixgrad::backend::cpu

namespace mixgrad::backend {

MIXGRAD_CPU_KERNEL(softmax_forward, cpu::softmax_forward);
MIXGRAD_CPU_KERNEL(softmax_backward, cpu::softmax_backward);

}  // namespace mixgrad::backend
