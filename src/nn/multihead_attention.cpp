#include "mixgrad/nn/multihead_attention.hpp"

#include <limits>
#include <sstream>

#include "mixgrad/nn/init.hpp"
#include "mixgrad/ops/attention.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/linalg.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "core/checks.hpp"

namespace mixgrad::nn {

namespace {

/// A PyTorch-convention mask (bool: true blocks) as F::scaled_dot_product_attention
/// reads it (bool: true attends), or a floating mask unchanged.
Tensor to_sdpa_mask(const Tensor& m) { return m.dtype() == DType::bool_ ? F::eq(m, 0.0) : m; }

/// A mask as an additive one in `dtype` (0 where attended, -inf where blocked).
Tensor additive(const Tensor& sdpa_mask, DType dtype) {
  if (sdpa_mask.dtype() != DType::bool_) return F::astype(sdpa_mask, dtype);
  return F::where(sdpa_mask, scalar(0.0, dtype, sdpa_mask.device()),
                  scalar(-std::numeric_limits<double>::infinity(), dtype, sdpa_mask.device()));
}

/// Query / key positions [N, L, E] from the module's layout (rank 3 with or
/// without batch_first, or unbatched rank 2), and back.
Tensor to_batch_major(const Tensor& t, bool batch_first) {
  if (t.ndim() == 2) return F::unsqueeze(t, 0);
  return batch_first ? t : F::transpose(t, 0, 1);
}
Tensor from_batch_major(const Tensor& t, int rank, bool batch_first) {
  if (rank == 2) return F::squeeze(t, 0);
  return batch_first ? t : F::transpose(t, 0, 1);
}

/// [N, len, E] as heads [N, H, len, E / H] (a view where the layout allows).
Tensor split_heads(const Tensor& t, int64_t heads) {
  const int64_t n = t.size(0), len = t.size(1);
  return F::transpose(F::reshape(t, {n, len, heads, t.size(2) / heads}), 1, 2);
}

/// The mask of `len` new queries after `past` cached positions: query i
/// sees keys 0..past + i (bool [len, past + len], true: attends).
/// F::scaled_dot_product_attention's is_causal aligns top-left (query i sees
/// keys 0..i), which is this mask only when past is 0.
Tensor causal_after(int64_t past, int64_t len, Device device) {
  const Tensor keys = F::unsqueeze(arange(past + len), 0);
  const Tensor queries = F::unsqueeze(arange(static_cast<double>(past), static_cast<double>(past + len), 1.0,
                                             DType::int64), 1);
  return F::le(keys, queries).to(device);
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, const MultiheadAttentionOptions& options)
    : embed_dim_(embed_dim), num_heads_(num_heads), options_(options) {
  if (embed_dim < 1 || num_heads < 1 || embed_dim % num_heads != 0)
    throw ValueError("MultiheadAttention: embed_dim must be a positive multiple of num_heads, got embed_dim " +
                     std::to_string(embed_dim) + " and num_heads " + std::to_string(num_heads));
  if (!(options.dropout >= 0 && options.dropout < 1))
    throw ValueError("MultiheadAttention: dropout must be in [0, 1), got " + std::to_string(options.dropout));
  in_proj_weight_ = register_parameter("in_proj_weight", empty({3 * embed_dim, embed_dim}));
  init::xavier_uniform_(in_proj_weight_);
  if (options.bias) in_proj_bias_ = register_parameter("in_proj_bias", zeros({3 * embed_dim}));
  out_proj_ = register_module("out_proj", Linear(embed_dim, embed_dim, {.bias = options.bias}));
  if (options.bias) init::zeros_(out_proj_->bias());
}

Tensor MultiheadAttention::forward(const Tensor& x) { return forward(x, x, x); }

Tensor MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const AttentionMasks& masks) {
  core::check_defined("MultiheadAttention", {&query, &key, &value});
  const int r = query.ndim();
  const int64_t E = embed_dim_, H = num_heads_;
  auto fail = [&](const std::string& why) {
    throw ShapeError(describe() + ": " + why + " (query " + core::describe(query) + ", key " + core::describe(key) +
                     ", value " + core::describe(value) + ")");
  };
  if ((r != 2 && r != 3) || key.ndim() != r || value.ndim() != r) fail("inputs must all be 3-D (batched) or 2-D");
  if (query.size(-1) != E || key.size(-1) != E || value.size(-1) != E) fail("the last dim must be embed_dim");
  // Everything as [N, L, E].
  const bool bf = options_.batch_first;
  const Tensor q = to_batch_major(query, bf), k = to_batch_major(key, bf), v = to_batch_major(value, bf);
  const int64_t N = q.size(0), L = q.size(1), S = k.size(1);
  if (k.size(0) != N || v.size(0) != N || v.size(1) != S) fail("key and value must match the query's batch and each other's length");

  Tensor qp, kp, vp;
  if (query.id() == key.id() && key.id() == value.id()) {  // self-attention: one product for q, k and v
    const Tensor qkv = F::linear(q, in_proj_weight_, in_proj_bias_);
    qp = F::narrow(qkv, 2, 0, E);
    kp = F::narrow(qkv, 2, E, E);
    vp = F::narrow(qkv, 2, 2 * E, E);
  } else {
    auto project = [&](const Tensor& t, int64_t part) {
      return F::linear(t, F::narrow(in_proj_weight_, 0, part * E, E),
                       in_proj_bias_.defined() ? F::narrow(in_proj_bias_, 0, part * E, E) : Tensor());
    };
    qp = project(q, 0);
    kp = project(k, 1);
    vp = project(v, 2);
  }

  F::AttentionOptions o{.dropout_p = is_training() ? options_.dropout : 0.0, .is_causal = masks.is_causal};
  Tensor attn = masks.attn_mask, pad = masks.key_padding_mask;
  if (attn.defined()) {
    if (masks.is_causal) throw ValueError(describe() + ": attn_mask and is_causal cannot both be set");
    if (attn.ndim() == 3) {
      if (attn.size(0) != N * H) fail("a 3-D attn_mask must be [N * num_heads, L, S], got " + core::describe(attn));
      attn = F::reshape(attn, {N, H, attn.size(1), attn.size(2)});
    } else if (attn.ndim() != 2) {
      fail("attn_mask must be [L, S] or [N * num_heads, L, S], got " + core::describe(attn));
    }
    attn = to_sdpa_mask(attn);
  }
  if (pad.defined()) {
    if (pad.ndim() != 2 || pad.size(0) != N || pad.size(1) != S)
      fail("key_padding_mask must be [N, S] = [" + std::to_string(N) + ", " + std::to_string(S) + "], got " +
           core::describe(pad));
    pad = F::reshape(to_sdpa_mask(pad), {N, 1, 1, S});
  }
  if (pad.defined() && masks.is_causal) {  // causal and padding: one additive mask
    attn = F::le(F::unsqueeze(arange(S), 0), F::unsqueeze(arange(L), 1)).to(q.device());
    o.is_causal = false;
  }
  if (attn.defined() && pad.defined())
    o.attn_mask = F::add(additive(attn, qp.dtype()), additive(pad, qp.dtype()));
  else
    o.attn_mask = attn.defined() ? attn : pad;
  const Tensor y = F::scaled_dot_product_attention(split_heads(qp, H), split_heads(kp, H), split_heads(vp, H), o);
  return from_batch_major(merge_heads(y), r, bf);
}

Tensor MultiheadAttention::merge_heads(const Tensor& y) {  // [N, H, L, D] -> out_proj([N, L, E])
  return (*out_proj_)(F::reshape(F::transpose(y, 1, 2), {y.size(0), y.size(2), embed_dim_}));
}

Tensor MultiheadAttention::forward(const Tensor& x, KVCache& cache, const Tensor& key_padding_mask) {
  core::check_defined("MultiheadAttention", {&x});
  const int r = x.ndim();
  const int64_t E = embed_dim_, H = num_heads_;
  if ((r != 2 && r != 3) || x.size(-1) != E)
    throw ShapeError(describe() + ": the cached forward takes " +
                     (options_.batch_first ? "[N, L, E]" : "[L, N, E]") + " or [L, E] with E = embed_dim, got " +
                     core::describe(x));
  const bool bf = options_.batch_first;
  const Tensor xb = to_batch_major(x, bf);
  const int64_t N = xb.size(0), L = xb.size(1), past = cache.length();
  cache.check_append(describe(), {N, H, L, E / H}, x.device());  // before any op runs
  const Tensor& pad = key_padding_mask;
  if (pad.defined()) {
    if (pad.ndim() != 2 || pad.size(0) != N || pad.size(1) != past + L)
      throw ShapeError(describe() + ": the cached forward's key_padding_mask must be [N, cached + new positions] = [" +
                       std::to_string(N) + ", " + std::to_string(past + L) + "], got " + core::describe(pad));
    if (pad.dtype() != DType::bool_)
      throw DTypeError(describe() + ": the cached forward's key_padding_mask must be bool (true: padding), got " +
                       core::describe(pad));
    core::check_same_device(describe().c_str(), {&x, &pad});
  }

  const Tensor qkv = F::linear(xb, in_proj_weight_, in_proj_bias_);
  const auto kv = cache.append(split_heads(F::narrow(qkv, 2, E, E), H), split_heads(F::narrow(qkv, 2, 2 * E, E), H),
                               describe());
  try {
    F::AttentionOptions o{.dropout_p = is_training() ? options_.dropout : 0.0};
    // An empty cache: SDPA's top-left causal mask is right. One new query
    // after `past` keys sees them all: no mask. A chunk after them: offset.
    if (pad.defined()) {  // the padding, and the causal cut where there is more than one query
      const Tensor keep = F::reshape(to_sdpa_mask(pad), {N, 1, 1, past + L});
      o.attn_mask = L > 1 ? F::add(additive(causal_after(past, L, x.device()), qkv.dtype()), additive(keep, qkv.dtype()))
                          : keep;
    } else if (past == 0) {
      o.is_causal = L > 1;
    } else if (L > 1) {
      o.attn_mask = causal_after(past, L, x.device());
    }
    const Tensor y = F::scaled_dot_product_attention(split_heads(F::narrow(qkv, 2, 0, E), H), kv.keys, kv.values, o);
    return from_batch_major(merge_heads(y), r, bf);
  } catch (...) {
    cache.crop(past);  // a call that throws leaves the cache as it was
    throw;
  }
}

KVCache MultiheadAttention::make_kv_cache(int64_t batch, int64_t capacity, DType dtype) const {
  return KVCache(num_heads_, embed_dim_ / num_heads_,
                 {.batch = batch, .capacity = capacity, .dtype = dtype, .device = in_proj_weight_.device()});
}

std::string MultiheadAttention::describe() const {
  std::ostringstream s;
  s << "MultiheadAttention(embed_dim=" << embed_dim_ << ", num_heads=" << num_heads_ << ", dropout=" << options_.dropout
    << ", batch_first=" << (options_.batch_first ? "true" : "false") << ")";
  return s.str();
}

}  // namespace mixgrad::nn
