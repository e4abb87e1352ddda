// mixgrad/nn/transformer.hpp — the transformer encoder layer of
// torch.nn.TransformerEncoderLayer, with its state-dict names (self_attn.*,
// linear1.*, linear2.*, norm1.*, norm2.*), post-norm (the default) or
// pre-norm (norm_first):
//
//   mg::nn::TransformerEncoderLayer layer(256, 8, {.dim_feedforward = 1024, .batch_first = true,
//                                                  .norm_first = true, .activation = mg::nn::Activation::gelu});
//   auto y = layer(x);                                      // x: [N, L, 256]
//   auto z = layer.forward(x, {.is_causal = true});         // a causal (decoder-only) stack
//   auto cache = layer.make_kv_cache(1, 128, mg::DType::bfloat16);
//   auto h = layer.forward(x_new, cache);                   // the same stack, decoding with a KV cache
//
// post-norm:  x = norm1(x + sa(x));  x = norm2(x + ff(x))
// pre-norm:   x = x + sa(norm1(x));  x = x + ff(norm2(x))
// sa(x) = dropout1(self_attn(x, x, x)); ff(x) = dropout2(linear2(dropout(act(linear1(x))))).
#pragma once

#include <functional>

#include "mixgrad/nn/dropout.hpp"
#include "mixgrad/nn/layer_norm.hpp"
#include "mixgrad/nn/linear.hpp"
#include "mixgrad/nn/multihead_attention.hpp"

namespace mixgrad::nn {

/// The feed-forward activation: ReLU, exact GELU, or GELU's tanh approximation.
enum class Activation { relu, gelu, gelu_tanh };

struct TransformerEncoderLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  Activation activation = Activation::relu;
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;
  bool bias = true;
};

class TransformerEncoderLayer : public Module {
 public:
  /// ValueError as MultiheadAttention, Linear, LayerNorm and Dropout give.
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, const TransformerEncoderLayerOptions& options = {});

  Tensor forward(const Tensor& src) override;
  /// With masks as MultiheadAttention takes them (src_mask, src_key_padding_mask, is_causal).
  Tensor forward(const Tensor& src, const AttentionMasks& masks);
  /// The layer as a causal decoder block over a KV cache: src holds the
  /// positions after the cache's length(); see
  /// MultiheadAttention::forward(x, cache). Token by token it equals
  /// forward(whole, {.is_causal = true}). A call that throws leaves the
  /// cache as it was. key_padding_mask: see MultiheadAttention::forward(x,
  /// cache, key_padding_mask), for batches of left-padded prompts.
  Tensor forward(const Tensor& src, KVCache& cache, const Tensor& key_padding_mask = Tensor());
  /// A cache for this layer's self-attention (see MultiheadAttention::make_kv_cache).
  KVCache make_kv_cache(int64_t batch, int64_t capacity, DType dtype) const;
  std::string describe() const override;

  MultiheadAttention& self_attn() { return *self_attn_; }

 private:
  Tensor feed_forward(const Tensor& x);
  /// The two residual branches around `attend` (the self-attention,
  /// with masks or with a cache), in post- or pre-norm order.
  Tensor residual_blocks(const Tensor& src, const std::function<Tensor(const Tensor&)>& attend);

  TransformerEncoderLayerOptions options_;
  std::shared_ptr<MultiheadAttention> self_attn_;
  std::shared_ptr<Linear> linear1_, linear2_;
  std::shared_ptr<Dropout> dropout_, dropout1_, dropout2_;
  std::shared_ptr<LayerNorm> norm1_, norm2_;
};

}  // namespace mixgrad::nn
