// oneDNN's 2-d pooling for the CPU backend (backend/cpu/pooling.cpp holds the
// choice and the built-in loops): max and avg (excluding padding) on plain
// NCHW, float32 and bfloat16 natively, float16 by way of float32; other
// dtypes return false.
#include "backend/onednn/pooling.hpp"

#if MIXGRAD_WITH_ONEDNN

#include "backend/copy.hpp"
#include "backend/onednn/common.hpp"

namespace mixgrad::backend::onednn {

namespace {

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

dnnl::algorithm algorithm(PoolKind kind) {
  return kind == PoolKind::max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_exclude_padding;
}

}  // namespace

bool pool2d_forward(PoolKind kind, const Tensor& x, const Tensor& y, const Pool2dParams& p, Tensor* workspace) {
  if (y.dtype() == DType::float16) {
    Tensor y32 = empty(y.shape(), DType::float32, y.device());
    if (!pool2d_forward(kind, onednn::to_float32(x), y32, p, workspace)) return false;
    backend::copy(y32, y);
    return true;
  }
  if (!onednn::native(y.dtype())) return false;
  const dnnl::algorithm algo = algorithm(kind);
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
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, onednn::memory(e->x, x)},
                                       {DNNL_ARG_DST, onednn::memory(e->y, y)}};
  if (workspace && e->ws) {
    *workspace = empty(Shape{static_cast<int64_t>(e->ws.get_size())}, DType::bool_, y.device());
    args.emplace(DNNL_ARG_WORKSPACE, onednn::memory(e->ws, *workspace));
  }
  onednn::execute(e->prim, args);
  return true;
}

bool pool2d_backward(PoolKind kind, const Tensor& gy, const Tensor& gx, const Pool2dParams& p,
                     const Tensor* workspace) {
  if (gx.dtype() == DType::float16) {
    Tensor gx32 = empty(gx.shape(), DType::float32, gx.device());
    if (!pool2d_backward(kind, onednn::to_float32(gy), gx32, p, workspace)) return false;
    backend::copy(gx32, gx);
    return true;
  }
  if (!onednn::native(gx.dtype())) return false;
  const dnnl::algorithm algo = algorithm(kind);
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
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_DIFF_DST, onednn::memory(e->gy, gy)},
                                       {DNNL_ARG_DIFF_SRC, onednn::memory(e->gx, gx)}};
  if (workspace) args.emplace(DNNL_ARG_WORKSPACE, onednn::memory(e->ws, *workspace));
  onednn::execute(e->prim, args);
  return true;
}

}  // namespace mixgrad::backend::onednn

#endif  // MIXGRAD_WITH_ONEDNN
