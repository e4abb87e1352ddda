// mixgrad/nn/transformer_decoder_layer.hpp — the transformer decoder layer of
// torch.nn.TransformerDecoderLayer: self-attention over the target, attention
// over the encoder's output (`memory`), and a feed-forward block, with
// PyTorch's state-dict names (self_attn.*, multihead_attn.*, linear1.*,
// linear2.*, norm1.*, norm2.*, norm3.*), post-norm (the default) or pre-norm
// (norm_first):
//
//   mg::nn::TransformerDecoderLayer layer(256, 8, {.dim_feedforward = 1024, .batch_first = true});
//   auto y = layer(tgt, memory);                              // tgt: [N, T, 256], memory: [N, S, 256]
//   auto z = layer(tgt, memory, {.is_causal = true},          // tgt_mask / tgt_key_padding_mask / tgt_is_causal
//                  {.key_padding_mask = memory_padding});     // memory_mask / ..._key_padding_mask / memory_is_causal
//
// post-norm:  x = norm1(x + sa(x));  x = norm2(x + mha(x, mem));  x = norm3(x + ff(x))
// pre-norm:   x = x + sa(norm1(x));  x = x + mha(norm2(x), mem);  x = x + ff(norm3(x))
// sa(x) = dropout1(self_attn(x, x, x)); mha(x, m) = dropout2(multihead_attn(x, m, m));
// ff(x) = dropout3(linear2(dropout(act(linear1(x))))).
#pragma once

#include "mixgrad/nn/transformer.hpp"

namespace mixgrad::nn {

/// PyTorch's encoder and decoder layers take the same arguments, so they
/// share one options struct (dim_feedforward, dropout, activation,
/// layer_norm_eps, batch_first, norm_first, bias).
using TransformerDecoderLayerOptions = TransformerEncoderLayerOptions;

class TransformerDecoderLayer : public Module {
 public:
  /// ValueError as MultiheadAttention, Linear, LayerNorm and Dropout give.
  TransformerDecoderLayer(int64_t d_model, int64_t nhead, const TransformerDecoderLayerOptions& options = {});

  /// tgt [T, N, E] and memory [S, N, E] ([N, T, E] and [N, S, E] with
  /// batch_first; unbatched [T, E] and [S, E]); the result has tgt's shape.
  /// `tgt_masks` go to the self-attention (PyTorch's tgt_mask,
  /// tgt_key_padding_mask, tgt_is_causal), `memory_masks` to the attention
  /// over memory (memory_mask, memory_key_padding_mask, memory_is_causal),
  /// with MultiheadAttention's conventions (bool: true blocks). ShapeError
  /// naming the layer and both shapes when tgt and memory do not fit the
  /// layer or each other; a bad mask throws as MultiheadAttention does. A
  /// throwing call leaves the global random generator as it was.
  Tensor forward(const Tensor& tgt, const Tensor& memory, const AttentionMasks& tgt_masks = {},
                 const AttentionMasks& memory_masks = {});
  Tensor operator()(const Tensor& tgt, const Tensor& memory, const AttentionMasks& tgt_masks = {},
                    const AttentionMasks& memory_masks = {}) {
    return forward(tgt, memory, tgt_masks, memory_masks);
  }
  /// A decoder layer needs memory: throws StateError pointing to forward(tgt, memory).
  Tensor forward(const Tensor& tgt) override;
  std::string describe() const override;

  MultiheadAttention& self_attn() { return *self_attn_; }
  MultiheadAttention& multihead_attn() { return *multihead_attn_; }

 private:
  void check_inputs(const Tensor& tgt, const Tensor& memory) const;
  Tensor layers(const Tensor& tgt, const Tensor& memory, const AttentionMasks& tgt_masks,
                const AttentionMasks& memory_masks);
  Tensor self_attention(const Tensor& x, const AttentionMasks& masks);
  Tensor memory_attention(const Tensor& x, const Tensor& memory, const AttentionMasks& masks);
  Tensor feed_forward(const Tensor& x);

  TransformerDecoderLayerOptions options_;
  std::shared_ptr<MultiheadAttention> self_attn_, multihead_attn_;
  std::shared_ptr<Linear> linear1_, linear2_;
  std::shared_ptr<Dropout> dropout_, dropout1_, dropout2_, dropout3_;
  std::shared_ptr<LayerNorm> norm1_, norm2_, norm3_;
};

}  // namespace mixgrad::nn
