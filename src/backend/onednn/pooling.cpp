// oneDNN's 2-d pooling for the CPU backend (backend/cpu/pooling.cpp holds the
// choice and the built-in loops): max and avg (excluding padding) on plain
// NCHW or, for a channels-last pair, on NHWC memory as it lies (the nhwc tag:
// oneDNN's NHWC kernels, no reorder; the backward is made with the same
// tags, so the forward's workspace stays valid for it), float32 and bfloat16
// natively, float16 by way of float32 in the same layout; other dtypes
// return false.
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

// True for a channels-last pair: either is not contiguous (a tensor with
// C == 1 or H * W == 1 is both, its memory the same under either tag).
bool nhwc(const Tensor& a, const Tensor& b) { return !a.is_contiguous() || !b.is_contiguous(); }

MemoryFormat format_of(const Tensor& a, const Tensor& b) {
  return nhwc(a, b) ? MemoryFormat::channels_last : MemoryFormat::contiguous;
}

// The descriptor of one operand of a pair laid out as `cl` says.
memory::desc pool_md(const Tensor& t, bool cl) {
  if (!cl) return onednn::plain_md(t.shape(), t.dtype());
  return MIXGRAD_ONEDNN_CHECK(memory::desc(onednn::dims(t.shape()), onednn::data_type(t.dtype()),
                                           memory::format_tag::nhwc));
}

onednn::Key pool_key(onednn::Family f, dnnl::algorithm algo, const Shape& x, const Shape& y, DType dt, bool cl,
                     const Pool2dParams& p) {
  onednn::Key k(f);
  k.add(static_cast<int64_t>(algo)).add(x).add(y).add(static_cast<int64_t>(dt)).add(int64_t{cl});
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
    Tensor y32 = empty(y.shape(), DType::float32, y.device(), format_of(x, y));
    if (!pool2d_forward(kind, onednn::to_float32(x), y32, p, workspace)) return false;
    backend::copy(y32, y);
    return true;
  }
  if (!onednn::native(y.dtype())) return false;
  const dnnl::algorithm algo = algorithm(kind);
  const bool cl = nhwc(x, y);
  const auto e = onednn::cache<PoolForwardEntry>().find_or_make(
      pool_key(onednn::Family::pool_forward, algo, x.shape(), y.shape(), y.dtype(), cl, p),
      [&]() -> std::shared_ptr<PoolForwardEntry> {
        auto e = std::make_shared<PoolForwardEntry>();
        e->x = pool_md(x, cl);
        e->y = pool_md(y, cl);
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
    Tensor gx32 = empty(gx.shape(), DType::float32, gx.device(), format_of(gx, gy));
    if (!pool2d_backward(kind, onednn::to_float32(gy), gx32, p, workspace)) return false;
    backend::copy(gx32, gx);
    return true;
  }
  if (!onednn::native(gx.dtype())) return false;
  const dnnl::algorithm algo = algorithm(kind);
  const bool cl = nhwc(gx, gy);
  const auto e = onednn::cache<PoolBackwardEntry>().find_or_make(
      pool_key(onednn::Family::pool_backward, algo, gx.shape(), gy.shape(), gx.dtype(), cl, p),
      [&]() -> std::shared_ptr<PoolBackwardEntry> {
        auto e = std::make_shared<PoolBackwardEntry>();
        e->gx = pool_md(gx, cl);
        e->gy = pool_md(gy, cl);
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
