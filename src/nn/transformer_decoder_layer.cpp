#include "mixgrad/nn/transformer_decoder_layer.hpp"


#include "mixgrad/error.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "nn/feed_forward.hpp"
#include "core/checks.hpp"
#include "core/random_state.hpp"

namespace mixgrad::nn {

TransformerDecoderLayer::TransformerDecoderLayer(int64_t d_model, int64_t nhead,
                                                 const TransformerDecoderLayerOptions& options)
    : options_(options) {
  const MultiheadAttentionOptions attention{
      .dropout = options.dropout, .bias = options.bias, .batch_first = options.batch_first};
  // Registration order is PyTorch's, so state_dict() lists the same keys in the same order.
  self_attn_ = register_module("self_attn", MultiheadAttention(d_model, nhead, attention));
  multihead_attn_ = register_module("multihead_attn", MultiheadAttention(d_model, nhead, attention));
  detail::register_feed_forward([this](const char* name, auto m) { return register_module(name, std::move(m)); },
                                d_model, options, linear1_, dropout_, linear2_);
  const LayerNormOptions ln{.eps = options.layer_norm_eps, .bias = options.bias};
  norm1_ = register_module("norm1", LayerNorm(d_model, ln));
  norm2_ = register_module("norm2", LayerNorm(d_model, ln));
  norm3_ = register_module("norm3", LayerNorm(d_model, ln));
  dropout1_ = register_module("dropout1", Dropout(options.dropout));
  dropout2_ = register_module("dropout2", Dropout(options.dropout));
  dropout3_ = register_module("dropout3", Dropout(options.dropout));
}

Tensor TransformerDecoderLayer::forward(const Tensor& /*tgt*/) {
  throw StateError(describe() + ": a decoder layer needs the encoder's output; call forward(tgt, memory)");
}

// The layer's own rule (tgt and memory of one layout, width and batch) is
// checked here, before any sublayer runs, so the error names both tensors;
// the masks are MultiheadAttention's to check.
void TransformerDecoderLayer::check_inputs(const Tensor& tgt, const Tensor& memory) const {
  core::check_defined("TransformerDecoderLayer", {&tgt, &memory});
  auto fail = [&](const std::string& why) {
    throw ShapeError(describe() + ": " + why + " (tgt " + core::describe(tgt) + ", memory " + core::describe(memory) +
                     ")");
  };
  const int r = tgt.ndim();
  const int64_t E = self_attn_->embed_dim();
  if ((r != 2 && r != 3) || memory.ndim() != r) fail("tgt and memory must both be 3-D (batched) or 2-D");
  if (tgt.size(-1) != E || memory.size(-1) != E) fail("the last dim must be d_model = " + std::to_string(E));
  const int batch_dim = options_.batch_first ? 0 : 1;
  if (r == 3 && tgt.size(batch_dim) != memory.size(batch_dim)) fail("tgt and memory must have the same batch size");
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory, const AttentionMasks& tgt_masks,
                                        const AttentionMasks& memory_masks) {
  check_inputs(tgt, memory);
  // A bad memory mask is found only when the attention over memory checks
  // it, after the self-attention block has run; in training its dropout has
  // drawn from the global generator by then. Putting the generator back
  // keeps the promise that a throwing call changes nothing.
  const random_state::State before = random_state::get();
  try {
    return layers(tgt, memory, tgt_masks, memory_masks);
  } catch (...) {
    random_state::set(before);
    throw;
  }
}

Tensor TransformerDecoderLayer::layers(const Tensor& tgt, const Tensor& memory, const AttentionMasks& tgt_masks,
                                       const AttentionMasks& memory_masks) {
  Tensor x = tgt;
  if (options_.norm_first) {
    x = F::add(x, self_attention((*norm1_)(x), tgt_masks));
    x = F::add(x, memory_attention((*norm2_)(x), memory, memory_masks));
    return F::add(x, feed_forward((*norm3_)(x)));
  }
  x = (*norm1_)(F::add(x, self_attention(x, tgt_masks)));
  x = (*norm2_)(F::add(x, memory_attention(x, memory, memory_masks)));
  return (*norm3_)(F::add(x, feed_forward(x)));
}

Tensor TransformerDecoderLayer::self_attention(const Tensor& x, const AttentionMasks& masks) {
  return (*dropout1_)(self_attn_->forward(x, x, x, masks));
}

Tensor TransformerDecoderLayer::memory_attention(const Tensor& x, const Tensor& memory, const AttentionMasks& masks) {
  return (*dropout2_)(multihead_attn_->forward(x, memory, memory, masks));
}

Tensor TransformerDecoderLayer::feed_forward(const Tensor& x) {
  return (*dropout3_)(detail::feed_forward(*linear1_, *dropout_, *linear2_, options_.activation, x));
}

std::string TransformerDecoderLayer::describe() const { return detail::describe_layer("TransformerDecoderLayer", *self_attn_, options_); }

}  // namespace mixgrad::nn
