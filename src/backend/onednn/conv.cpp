// oneDNN's 2-d convolution for the CPU backend (backend/cpu/conv.cpp holds
// the choice and the built-in path). NCHW tensors stay plain NCHW / OIHW
// (GOIHW for groups) and are reordered per call into the blocked layouts the
// primitives choose, which measured about 2x faster here than the
// plain-layout (gemm) kernels, reorders included. Channels-last activations
// are given to the primitive as NHWC, which it reads and writes as they lie
// (no reorder); weights, in either layout, are reordered to the primitive's. 16-bit convolutions that
// oneDNN cannot run at float32 speed compute in float32
// (computes_in_float32), converting as the reorders move the data. Other
// dtypes return false.
#include "backend/onednn/conv.hpp"

#if MIXGRAD_WITH_ONEDNN

#include "backend/copy.hpp"
#include "backend/onednn/common.hpp"

namespace mixgrad::backend::onednn {

namespace {

using dnnl::memory;

// The weight's descriptor with its own strides (OIHW or OHWI), as GOIHW for groups.
memory::desc weights_md(const Tensor& w, int64_t groups) {
  if (groups == 1) return onednn::strided_md(w);
  const Shape& st = w.strides();
  const Shape s{groups, w.shape()[0] / groups, w.shape()[1], w.shape()[2], w.shape()[3]};
  const memory::dims strides{st[0] * s[1], st[0], st[1], st[2], st[3]};
  return MIXGRAD_ONEDNN_CHECK(memory::desc(onednn::dims(s), onednn::data_type(w.dtype()), strides));
}

// The same extents, layout left to the primitive, in the dtype it computes in.
memory::desc any_md(const memory::desc& plain, memory::data_type compute) {
  return MIXGRAD_ONEDNN_CHECK(memory::desc(plain.dims(), compute, memory::format_tag::any));
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
                     const Conv2dParams& p, DType compute) {
  onednn::Key k(f);
  k.add(x).add(w).add(bias).add(y).add(static_cast<int64_t>(compute));
  k.add(p.stride.h).add(p.stride.w).add(p.padding.h).add(p.padding.w);
  k.add(p.dilation.h).add(p.dilation.w).add(p.groups);
  return k;
}

// Plain descriptors of a convolution's tensors (x / gx, w / gw, bias / gbias,
// y / gy), and the dtype the primitive computes in: theirs, or float32 for
// 16-bit tensors on a CPU without 16-bit math (computes_in_float32). Then
// the layout reorders of the activations convert as they move the data
// (LayoutArg::widen): no plain float32 copy of them is made.
struct ConvMds {
  memory::desc x, w, bias, y;
  memory::data_type compute;
  bool nhwc = false;  // channels-last activations: the primitive takes them as NHWC
  // An activation's descriptor for the primitive: NHWC, or left to it.
  memory::desc activation(const memory::desc& plain) const {
    return nhwc ? MIXGRAD_ONEDNN_CHECK(memory::desc(plain.dims(), compute, memory::format_tag::nhwc))
                : any_md(plain, compute);
  }
};

// float32 for 16-bit tensors oneDNN computes in float32 here, else their own.
DType compute_dtype(DType t) { return onednn::computes_in_float32(t) ? DType::float32 : t; }

// The weight as the primitive reads it: float32 (as it is, or converted)
// when it computes in float32.
Tensor weight_for(const Tensor& w, DType compute) { return compute == DType::float32 ? onednn::to_float32(w) : w; }

ConvMds plain_mds(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const Conv2dParams& p) {
  ConvMds m;
  m.x = onednn::strided_md(x);  // x, y dense: contiguous or channels-last (both, or neither)
  m.w = weights_md(w, p.groups);
  m.y = onednn::strided_md(y);
  m.nhwc = !x.is_contiguous() || !y.is_contiguous();
  if (bias.defined()) m.bias = onednn::plain_md(bias.shape(), bias.dtype());
  m.compute = onednn::data_type(compute_dtype(y.dtype()));
  return m;
}

// The forward descriptor, on `any` layouts; also the hint of the backward ones.
dnnl::convolution_forward::primitive_desc forward_pd(const ConvMds& m, const Conv2dParams& p) {
  const Geometry g = geometry(p);
  const auto algo = dnnl::algorithm::convolution_direct;
  const auto kind = dnnl::prop_kind::forward_training;
  const memory::desc x = m.activation(m.x), w = any_md(m.w, m.compute), y = m.activation(m.y);
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

// Bias in a dtype oneDNN takes (bfloat16 convolutions take float32 bias
// too; a float32-computed one takes float32).
Tensor onednn_bias(const Tensor& bias, DType compute) {
  if (!bias.defined() || (onednn::native(bias.dtype()) && compute != DType::float32)) return bias;
  return onednn::to_float32(bias);
}

}  // namespace

bool conv2d_forward(const Tensor& x, const Tensor& w_in, const Tensor& bias_in, const Tensor& y,
                    const Conv2dParams& p) {
  const DType compute = compute_dtype(y.dtype());
  if (!onednn::native(compute)) return false;
  const Tensor w = weight_for(w_in, compute), bias = onednn_bias(bias_in, compute);
  const auto e = onednn::cache<ForwardEntry>().find_or_make(
      conv_key(onednn::Family::conv_forward, x, w, bias, y, p, compute), [&]() -> std::shared_ptr<ForwardEntry> {
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

bool conv2d_backward_data(const Tensor& gy, const Tensor& w_in, const Tensor& gx, const Conv2dParams& p) {
  const DType compute = compute_dtype(gx.dtype());
  if (!onednn::native(compute)) return false;
  const Tensor w = weight_for(w_in, compute);
  const auto e = onednn::cache<BackwardDataEntry>().find_or_make(
      conv_key(onednn::Family::conv_backward_data, gx, w, Tensor(), gy, p, compute),
      [&]() -> std::shared_ptr<BackwardDataEntry> {
        const ConvMds m = plain_mds(gx, w, Tensor(), gy, p);
        const auto hint = forward_pd(m, p);
        if (!hint) return nullptr;
        const Geometry g = geometry(p);
        const auto desc = MIXGRAD_ONEDNN_CHECK(
            dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, m.activation(m.x),
                                                  any_md(m.w, m.compute), m.activation(m.y), g.strides,
                                                  g.dilates, g.pad_l, g.pad_r));
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

bool conv2d_backward_weights(const Tensor& gy, const Tensor& x, const Tensor& gw, const Tensor& gb,
                             const Conv2dParams& p) {
  const DType compute = compute_dtype(gw.dtype());
  if (!onednn::native(compute)) return false;
  // oneDNN writes the bias gradient in the dtype it computes in or in
  // float32; into a float32 scratch for any other.
  const bool bias_direct = !gb.defined() || gb.dtype() == compute || gb.dtype() == DType::float32;
  Tensor gb_out = bias_direct ? gb : empty(gb.shape(), DType::float32, gb.device());
  const auto e = onednn::cache<BackwardWeightsEntry>().find_or_make(
      conv_key(onednn::Family::conv_backward_weights, x, gw, gb_out, gy, p, compute),
      [&]() -> std::shared_ptr<BackwardWeightsEntry> {
        const ConvMds m = plain_mds(x, gw, gb_out, gy, p);
        const auto hint = forward_pd(m, p);
        if (!hint) return nullptr;
        const Geometry g = geometry(p);
        const auto algo = dnnl::algorithm::convolution_direct;
        const dnnl::memory::desc xa = m.activation(m.x), wa = any_md(m.w, m.compute), ya = m.activation(m.y);
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
  if (gb_out.defined() && gb_out.impl() != gb.impl()) backend::copy(gb_out, gb);
  return true;
}

}  // namespace mixgrad::backend::onednn

#endif  // MIXGRAD_WITH_ONEDNN
