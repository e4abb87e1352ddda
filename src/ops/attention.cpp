// F::scaled_dot_product_attention: validation, autocast, and the choice of
// path. The CPU without dropout runs the fused kernel (backend/attention.hpp);
// dropout and other devices run the composed math below, which is also the
// gradient of a recorded backward (create_graph) and of a floating mask that
// needs one.
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "backend/attention.hpp"
#include "hooks/op_hooks.hpp"
#include "mixgrad/ops/attention.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/linalg.hpp"
#include "mixgrad/ops/nn.hpp"
#include "mixgrad/ops/reduction.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "hooks/kept_results.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

std::string describe_inputs(const Tensor& q, const Tensor& k, const Tensor& v) {
  return "query " + ops::describe(q) + ", key " + ops::describe(k) + ", value " + ops::describe(v);
}

/// The geometry of a call: heads, lengths and dims, after validation.
struct Geometry {
  Shape lead;  // the dims before the head dim (before L for rank-2 inputs: none)
  int64_t n = 1, heads = 1, kv_heads = 1, q_len = 0, kv_len = 0, head_dim = 0, value_dim = 0;
  Shape scores;  // [..., H, L, S]: what the mask broadcasts to
};

Geometry validate(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  const int r = q.ndim();
  auto fail = [&](const std::string& why) {
    throw ShapeError(std::string(kOp) + ": " + why + " (" + describe_inputs(q, k, v) + ")");
  };
  if (r < 2) fail("inputs need at least 2 dims, [..., L, E]");
  if (k.ndim() != r || v.ndim() != r) fail("query, key and value must have the same number of dims");
  if (q.dtype() != k.dtype() || q.dtype() != v.dtype())
    throw DTypeError(std::string(kOp) + ": query, key and value must have the same dtype (" +
                     describe_inputs(q, k, v) + ")");
  if (q.shape()[r - 1] != k.shape()[r - 1]) fail("query and key must have the same last dim E");
  if (k.shape()[r - 2] != v.shape()[r - 2]) fail("key and value must have the same length S");
  Geometry g;
  for (int d = 0; d < r - 3; ++d) {
    if (q.shape()[d] != k.shape()[d] || q.shape()[d] != v.shape()[d]) fail("the batch dims must be equal");
    g.lead.push_back(q.shape()[d]);
    g.n *= q.shape()[d];
  }
  if (r >= 3) {
    g.heads = q.shape()[r - 3];
    g.kv_heads = k.shape()[r - 3];
    if (v.shape()[r - 3] != g.kv_heads) fail("key and value must have the same number of heads");
    if (g.heads != g.kv_heads) {
      if (!o.enable_gqa) fail("query and key have different head counts; set enable_gqa for grouped-query attention");
      if (g.kv_heads == 0 || g.heads % g.kv_heads != 0)
        fail("with enable_gqa the query's head count must be a multiple of the key's");
    }
  }
  g.q_len = q.shape()[r - 2];
  g.kv_len = k.shape()[r - 2];
  g.head_dim = q.shape()[r - 1];
  g.value_dim = v.shape()[r - 1];
  g.scores = g.lead;
  if (r >= 3) g.scores.push_back(g.heads);
  g.scores.push_back(g.q_len);
  g.scores.push_back(g.kv_len);

  const Tensor& m = o.attn_mask;
  if (m.defined()) {
    if (o.is_causal)
      throw ValueError(std::string(kOp) + ": attn_mask and is_causal cannot both be set (mask " + ops::describe(m) +
                       ")");
    if (m.dtype() != DType::bool_ && !is_floating_point(m.dtype()))
      throw DTypeError(std::string(kOp) + ": attn_mask must be bool or floating, got " + ops::describe(m));
    bool fits = m.ndim() <= g.scores.ndim();
    for (int i = 1; fits && i <= m.ndim(); ++i) {
      const int64_t md = m.shape()[m.ndim() - i], sd = g.scores[g.scores.ndim() - i];
      fits = md == 1 || md == sd;
    }
    if (!fits)
      throw ShapeError(std::string(kOp) + ": attn_mask " + ops::describe(m) + " does not broadcast to the scores " +
                       to_string(g.scores) + " (" + describe_inputs(q, k, v) + ")");
  }
  if (!(o.dropout_p >= 0.0 && o.dropout_p <= 1.0))
    throw ValueError(std::string(kOp) + ": dropout_p must be in [0, 1], got " + std::to_string(o.dropout_p));
  if (o.scale && !std::isfinite(*o.scale))
    throw ValueError(std::string(kOp) + ": scale must be finite, got " + std::to_string(*o.scale));
  return g;
}

double scale_of(const AttentionOptions& o, int64_t head_dim) {
  return o.scale ? *o.scale : 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(head_dim, 1)));
}

// ---- the composed math (F:: ops, recorded like any others) -----------------------------

/// k or v with each of its Hk heads repeated H / Hk times: [..., H, S, *].
Tensor repeat_kv(const Tensor& t, int64_t heads) {
  const int r = t.ndim();
  if (r < 3 || t.shape()[r - 3] == heads) return t;
  const int64_t group = heads / t.shape()[r - 3];
  Shape wide = t.shape();
  wide.insert(r - 2, group);  // [..., Hk, group, S, *]
  Shape out = t.shape();
  out[r - 3] = heads;
  return reshape(broadcast_to(unsqueeze(t, r - 2), wide), out);
}

/// The inverse of repeat_kv for gradients: the group's heads summed.
Tensor sum_groups(const Tensor& t, int64_t kv_heads) {
  const int r = t.ndim();
  if (r < 3 || t.shape()[r - 3] == kv_heads) return t;
  Shape grouped = t.shape();
  grouped[r - 3] = kv_heads;
  grouped.insert(r - 2, t.shape()[r - 3] / kv_heads);
  return sum(reshape(t, grouped), {r - 2});
}

/// The attention weights softmax(q k^T * scale + mask) with k already
/// repeated to q's heads; rows that see no key are 0.
Tensor attention_weights(const Tensor& q, const Tensor& k, const AttentionOptions& o, double scale) {
  const int r = q.ndim();
  Tensor s = mul(matmul(q, transpose(k, r - 2, r - 1)), scale);
  const double inf = std::numeric_limits<double>::infinity();
  Tensor keep;
  if (o.is_causal) {
    const int64_t L = q.shape()[r - 2], S = k.shape()[r - 2];
    keep = le(unsqueeze(arange(S), 0), unsqueeze(arange(L), 1)).to(q.device());
  } else if (o.attn_mask.defined() && o.attn_mask.dtype() == DType::bool_) {
    keep = o.attn_mask;
  } else if (o.attn_mask.defined()) {
    s = add(s, o.attn_mask);
  }
  if (keep.defined()) s = where(keep, s, scalar(-inf, s.dtype(), s.device()));
  if (!o.is_causal && !o.attn_mask.defined()) return softmax(s, -1);
  const Tensor dead = eq(max(s, {-1}, true), -inf);  // rows with no key: softmax of zeros, then 0
  const Tensor zero = scalar(0.0, s.dtype(), s.device());
  return where(dead, zero, softmax(where(dead, zero, s), -1));
}

/// The dtype the composed math runs in: float32 for 16-bit inputs, which the
/// fused kernels accumulate in too, so that the fallback is as accurate as
/// the kernel it stands in for on every device; else the inputs' own.
DType math_dtype(DType t) { return is_low_precision(t) ? DType::float32 : t; }

/// `o` with a floating (additive) mask in `dt`.
AttentionOptions mask_in(AttentionOptions o, DType dt) {
  if (o.attn_mask.defined() && is_floating_point(o.attn_mask.dtype())) o.attn_mask = astype(o.attn_mask, dt);
  return o;
}

Tensor composed_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Geometry& g,
                          const AttentionOptions& o) {
  if (const DType dt = math_dtype(q.dtype()); dt != q.dtype()) {
    const amp::detail::AutocastOff float32_inside;
    return astype(composed_attention(astype(q, dt), astype(k, dt), astype(v, dt), g, mask_in(o, dt)), q.dtype());
  }
  Tensor p = attention_weights(q, repeat_kv(k, g.heads), o, scale_of(o, g.head_dim));
  if (o.dropout_p > 0.0) p = dropout(p, o.dropout_p);
  return matmul(p, repeat_kv(v, g.heads));
}

/// The gradients of the fused op as F:: ops (for a recorded backward, and
/// for a floating mask's gradient): dS = P (dP - rowsum(dP P)).
void composed_grads(const Tensor& q_in, const Tensor& k, const Tensor& v, const Geometry& g,
                    const AttentionOptions& o_in, const Tensor& grad, autodiff::InputGrads& gi) {
  const int r = q_in.ndim();
  const double scale = scale_of(o_in, g.head_dim);
  const DType dt = math_dtype(q_in.dtype());
  const amp::detail::AutocastOff float32_inside;
  const Tensor q = astype(q_in, dt);
  const AttentionOptions o = mask_in(o_in, dt);
  const Tensor ke = repeat_kv(astype(k, dt), g.heads), ve = repeat_kv(astype(v, dt), g.heads);
  const Tensor p = attention_weights(q, ke, o, scale);
  const Tensor gd = astype(grad, p.dtype());
  if (gi.needs(2)) gi.set(2, astype(sum_groups(matmul(transpose(p, r - 2, r - 1), gd), g.kv_heads), v.dtype()));
  if (!gi.needs(0) && !gi.needs(1) && !gi.needs(3)) return;
  const Tensor dp = matmul(gd, transpose(ve, r - 2, r - 1));
  const Tensor ds = mul(p, sub(dp, sum(mul(dp, p), {-1}, true)));
  if (gi.needs(0)) gi.set(0, astype(mul(matmul(ds, ke), scale), q_in.dtype()));
  if (gi.needs(1))
    gi.set(1, astype(sum_groups(mul(matmul(transpose(ds, r - 2, r - 1), q), scale), g.kv_heads), k.dtype()));
  if (gi.needs(3)) gi.set(3, astype(sum_to(ds, o.attn_mask.shape()), o_in.attn_mask.dtype()));
}

// ---- the fused path -------------------------------------------------------------------

/// The mask as the kernel reads it: bool, or converted to `acc` (in its own
/// small shape, no broadcast copy), with strides for the kernel's
/// [N, H, L, S], N the batch dims flattened: the mask's dims right-aligned
/// against the scores, a dim of extent 1 (or missing) broadcast with stride 0.
void set_mask(backend::AttentionArgs& a, const Tensor& mask, const Geometry& g, DType acc) {
  if (!mask.defined()) return;
  const bool keep = mask.dtype() == DType::bool_;
  a.mask_kind = keep ? backend::AttentionMask::keep : backend::AttentionMask::add;
  Tensor m = ops::dense(mask, keep ? DType::bool_ : acc);
  // Several batch dims that the mask varies along do not flatten into one
  // stride: then the mask is expanded to the scores' shape.
  if (g.lead.ndim() > 1 && m.ndim() > 3) m = ops::dense(broadcast_to(m, g.scores));
  auto stride_of = [&](int from_back) -> int64_t {
    const int d = m.ndim() - from_back;
    return d < 0 || m.shape()[d] == 1 ? 0 : m.strides()[d];
  };
  a.mask_strides = {stride_of(4), stride_of(3), stride_of(2), stride_of(1)};
  a.mask = m;
}

/// q, k or v as the kernel reads it, with its layout: in place when its
/// last dim has unit stride and its batch dims (those before the head dim)
/// flatten into one stride: the heads of a packed [N, L, 3E] projection,
/// which reshape and transpose leave as views, and a KV cache's first S
/// positions (decoding does not copy the whole cache per token). Any other
/// layout is copied dense.
Tensor in_heads_layout(const Tensor& t, backend::HeadLayout& layout) {
  const int r = t.ndim();
  const Shape& ext = t.shape();
  const Shape& st = t.strides();
  const int64_t len = ext[r - 2], dim = ext[r - 1];
  const int64_t heads = r >= 3 ? ext[r - 3] : 1;
  bool ok = dim <= 1 || st[r - 1] == 1;
  // The stride of the innermost batch dim of extent > 1; span: how many
  // batch entries the dims walked so far cover, in units of it.
  int64_t batch = 0, span = 0;
  for (int d = r - 4; ok && d >= 0; --d) {
    if (ext[d] <= 1) continue;
    if (span == 0) {
      batch = st[d];
      span = ext[d];
    } else {
      ok = st[d] == batch * span;
      span *= ext[d];
    }
  }
  if (!ok) {
    layout = backend::HeadLayout::dense(heads, len, dim);
    return ops::dense(t);
  }
  layout = {.batch = batch, .head = r >= 3 ? st[r - 3] : 0, .row = st[r - 2]};
  return t;
}

/// The device's fused kernel, or nothing when it does not take the call
/// (CUDA: what cuDNN does not support), which then runs the composed math.
std::optional<Tensor> fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Geometry& g,
                                      const AttentionOptions& o) {
  const DType acc = q.dtype() == DType::float64 ? DType::float64 : DType::float32;
  backend::HeadLayout q_layout, k_layout, v_layout;
  const Tensor qr = in_heads_layout(q, q_layout), kr = in_heads_layout(k, k_layout), vr = in_heads_layout(v, v_layout);
  backend::AttentionArgs a{.q = qr,
                           .k = kr,
                           .v = vr,
                           .mask = Tensor(),
                           .mask_kind = backend::AttentionMask::none,
                           .mask_strides = {},
                           .causal = o.is_causal,
                           .scale = scale_of(o, g.head_dim),
                           .n = g.n,
                           .heads = g.heads,
                           .kv_heads = g.kv_heads,
                           .q_len = g.q_len,
                           .kv_len = g.kv_len,
                           .head_dim = g.head_dim,
                           .value_dim = g.value_dim,
                           .q_layout = q_layout,
                           .k_layout = k_layout,
                           .v_layout = v_layout};
  set_mask(a, o.attn_mask, g, acc);
  Shape out_shape = q.shape();
  out_shape[q.ndim() - 1] = g.value_dim;
  Shape lse_shape = g.scores;
  lse_shape.erase(lse_shape.ndim() - 1);
  // Selective checkpointing keeps the output with its statistics (an empty
  // pair: the fused kernel declined, and the composed path runs).
  const std::array<Tensor, 2> results =
      autodiff::keep_or_compute(OpKind::scaled_dot_product_attention, out_shape, q.dtype(), [&] {
        backend::AttentionOutputs o2{.out = empty(out_shape, q.dtype(), q.device()),
                                     .lse = empty(lse_shape, acc, q.device())};
        if (!backend::attention_forward(a, o2)) return std::array<Tensor, 2>{};
        return std::array<Tensor, 2>{o2.out, o2.lse};
      });
  if (!results[0].defined()) return std::nullopt;
  const backend::AttentionOutputs saved{.out = results[0], .lse = results[1]};
  const Tensor out = saved.out;
  const Tensor& mask = o.attn_mask;
  autodiff::record(OpKind::scaled_dot_product_attention, {&q, &k, &v, &mask}, out, [&] {
    return [a, saved, q, k, v, g, o](const Tensor& grad, autodiff::InputGrads& gi) {
      if (gi.create_graph() || gi.needs(3)) return composed_grads(q, k, v, g, o, grad, gi);
      backend::AttentionGrads grads;
      if (gi.needs(0)) grads.q = empty(q.shape(), q.dtype(), q.device());
      if (gi.needs(1)) grads.k = empty(k.shape(), k.dtype(), k.device());
      if (gi.needs(2)) grads.v = empty(v.shape(), v.dtype(), v.device());
      if (!backend::attention_backward(a, saved, ops::dense(grad, q.dtype()), grads))
        return composed_grads(q, k, v, g, o, grad, gi);
      for (size_t i = 0; i < 3; ++i)
        if (gi.needs(i)) gi.set(i, i == 0 ? grads.q : i == 1 ? grads.k : grads.v);
    };
  });
  return out;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const AttentionOptions& options) {
  ops::check_defined(kOp, {&query, &key, &value});
  ops::check_same_device(kOp, {&query, &key, &value, &options.attn_mask});
  for (const Tensor* t : {&query, &key, &value}) ops::check_floating(kOp, *t);
  Tensor q = query, k = key, v = value;
  AttentionOptions o = options;
  amp::autocast_inputs(OpKind::scaled_dot_product_attention, {&q, &k, &v, &o.attn_mask});
  const Geometry g = validate(q, k, v, o);
  if (o.dropout_p == 0.0)
    if (std::optional<Tensor> out = fused_attention(q, k, v, g, o)) return *out;
  return composed_attention(q, k, v, g, o);
}

}  // namespace mixgrad::F
