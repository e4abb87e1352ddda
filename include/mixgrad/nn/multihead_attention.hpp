// mixgrad/nn/multihead_attention.hpp — multi-head attention as
// torch.nn.MultiheadAttention: the same parameters under the same state-dict
// names (in_proj_weight [3E, E], in_proj_bias [3E], out_proj.weight,
// out_proj.bias), the same initialisation and mask conventions, and
// F::scaled_dot_product_attention inside.
//
//   mg::nn::MultiheadAttention mha(256, 8, {.dropout = 0.1, .batch_first = true});
//   auto y = mha(x);                                  // self-attention, x: [N, L, 256]
//   auto z = mha.forward(q, kv, kv, {.is_causal = true});
//   auto cache = mha.make_kv_cache(/*batch=*/2, /*capacity=*/128, mg::DType::float32);
//   auto p = mha.forward(prompt, cache);              // decoding: the prompt, then
//   auto t = mha.forward(next, cache);                // one token at a time (see kv_cache.hpp)
//
// Masks follow nn.MultiheadAttention, not F::scaled_dot_product_attention:
// a bool attn_mask or key_padding_mask is true where attention is NOT
// allowed; a floating one is added to the scores. attn_mask is [L, S] or
// [N * num_heads, L, S]; key_padding_mask is [N, S]. The attention weights
// are not returned (need_weights=False in PyTorch terms).
#pragma once

#include "mixgrad/nn/kv_cache.hpp"
#include "mixgrad/nn/linear.hpp"
#include "mixgrad/nn/module.hpp"

namespace mixgrad::nn {

struct MultiheadAttentionOptions {
  double dropout = 0.0;      // on the attention weights, in training mode
  bool bias = true;          // in_proj_bias and out_proj.bias
  bool batch_first = false;  // [N, L, E] instead of PyTorch's default [L, N, E]
};

struct AttentionMasks {
  Tensor attn_mask{};         // [L, S] or [N * num_heads, L, S]: bool (true: blocked) or added
  Tensor key_padding_mask{};  // [N, S]: bool (true: padding, ignored) or added
  bool is_causal = false;   // query i attends to keys 0..i (without attn_mask)
};

class MultiheadAttention : public Module {
 public:
  /// ValueError unless embed_dim is a positive multiple of num_heads and 0 <= dropout < 1.
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, const MultiheadAttentionOptions& options = {});

  /// Self-attention: forward(x, x, x).
  Tensor forward(const Tensor& x) override;
  /// query [L, N, E] (or [N, L, E] with batch_first; unbatched [L, E]),
  /// key and value [S, N, E]. ShapeError naming the shapes otherwise.
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value, const AttentionMasks& masks = {});
  /// Causal self-attention of new positions against a cache (decoder-only
  /// inference): x holds the L positions that follow the cache's length() P,
  /// in forward(x)'s layout. Their keys and values are appended and position
  /// P + i attends to keys 0..P + i: token by token, the result equals the
  /// full forward with is_causal over the whole sequence. The errors of
  /// KVCache::append (capacity, batch, heads, dtype, device, a recording
  /// GradManager), before anything is computed or written.
  ///
  /// Batched decoding of sequences of different lengths: left-pad the
  /// shorter prompts and pass key_padding_mask, bool [N, P + L], true at
  /// the padded positions of every sequence (all that are cached and the L
  /// new ones). A sequence then attends only to its own tokens, and its
  /// outputs equal those of decoding it alone (position embeddings that
  /// depend only on distance, such as rotary ones, give the same scores
  /// when every sequence counts positions from the start of the cache). The
  /// outputs at padded positions carry no meaning. ShapeError / DTypeError
  /// for another mask shape or dtype, before anything is computed or written.
  Tensor forward(const Tensor& x, KVCache& cache, const Tensor& key_padding_mask = Tensor());
  /// A cache for this module's keys and values (its heads and head dim, on
  /// its parameters' device); `dtype` is the one attention runs in.
  KVCache make_kv_cache(int64_t batch, int64_t capacity, DType dtype) const;
  std::string describe() const override;

  const Tensor& in_proj_weight() const { return in_proj_weight_; }
  const Tensor& in_proj_bias() const { return in_proj_bias_; }
  Linear& out_proj() { return *out_proj_; }
  int64_t embed_dim() const { return embed_dim_; }
  int64_t num_heads() const { return num_heads_; }

 private:
  /// Heads [N, H, L, D] back to [N, L, E], through out_proj.
  Tensor merge_heads(const Tensor& y);

  int64_t embed_dim_, num_heads_;
  MultiheadAttentionOptions options_;
  Tensor in_proj_weight_, in_proj_bias_;
  std::shared_ptr<Linear> out_proj_;
};

}  // namespace mixgrad::nn
