// mixgrad/nn/multihead_attention.hpp — multi-head attention as
// torch.nn.MultiheadAttention: the same parameters under the same state-dict
// names (in_proj_weight [3E, E], in_proj_bias [3E], out_proj.weight,
// out_proj.bias), the same initialisation and mask conventions, and
// F::scaled_dot_product_attention inside.
//
//   mg::nn::MultiheadAttention mha(256, 8, {.dropout = 0.1, .batch_first = true});
//   auto y = mha(x);                                  // self-attention, x: [N, L, 256]
//   auto z = mha.forward(q, kv, kv, {.is_causal = true});
//
// Masks follow nn.MultiheadAttention, not F::scaled_dot_product_attention:
// a bool attn_mask or key_padding_mask is true where attention is NOT
// allowed; a floating one is added to the scores. attn_mask is [L, S] or
// [N * num_heads, L, S]; key_padding_mask is [N, S]. The attention weights
// are not returned (need_weights=False in PyTorch terms).
#pragma once

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
  std::string describe() const override;

  const Tensor& in_proj_weight() const { return in_proj_weight_; }
  const Tensor& in_proj_bias() const { return in_proj_bias_; }
  Linear& out_proj() { return *out_proj_; }
  int64_t embed_dim() const { return embed_dim_; }
  int64_t num_heads() const { return num_heads_; }

 private:
  int64_t embed_dim_, num_heads_;
  MultiheadAttentionOptions options_;
  Tensor in_proj_weight_, in_proj_bias_;
  std::shared_ptr<Linear> out_proj_;
};

}  // namespace mixgrad::nn
