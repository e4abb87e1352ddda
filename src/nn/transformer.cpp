#include "mixgrad/nn/transformer.hpp"

#include <sstream>

#include "mixgrad/ops/elementwise.hpp"
#include "nn/feed_forward.hpp"

namespace mixgrad::nn {

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead,
                                                 const TransformerEncoderLayerOptions& options)
    : options_(options) {
  self_attn_ = register_module("self_attn", MultiheadAttention(d_model, nhead,
                                                               {.dropout = options.dropout,
                                                                .bias = options.bias,
                                                                .batch_first = options.batch_first}));
  linear1_ = register_module("linear1", Linear(d_model, options.dim_feedforward, {.bias = options.bias}));
  dropout_ = register_module("dropout", Dropout(options.dropout));
  linear2_ = register_module("linear2", Linear(options.dim_feedforward, d_model, {.bias = options.bias}));
  const LayerNormOptions ln{.eps = options.layer_norm_eps, .bias = options.bias};
  norm1_ = register_module("norm1", LayerNorm(d_model, ln));
  norm2_ = register_module("norm2", LayerNorm(d_model, ln));
  dropout1_ = register_module("dropout1", Dropout(options.dropout));
  dropout2_ = register_module("dropout2", Dropout(options.dropout));
}

Tensor TransformerEncoderLayer::self_attention(const Tensor& x, const AttentionMasks& masks) {
  return (*dropout1_)(self_attn_->forward(x, x, x, masks));
}

Tensor TransformerEncoderLayer::feed_forward(const Tensor& x) {
  return (*dropout2_)(detail::feed_forward(*linear1_, *dropout_, *linear2_, options_.activation, x));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src) { return forward(src, {}); }

Tensor TransformerEncoderLayer::forward(const Tensor& src, const AttentionMasks& masks) {
  Tensor x = src;
  if (options_.norm_first) {
    x = F::add(x, self_attention((*norm1_)(x), masks));
    return F::add(x, feed_forward((*norm2_)(x)));
  }
  x = (*norm1_)(F::add(x, self_attention(x, masks)));
  return (*norm2_)(F::add(x, feed_forward(x)));
}

std::string TransformerEncoderLayer::describe() const {
  std::ostringstream s;
  s << "TransformerEncoderLayer(d_model=" << self_attn_->embed_dim() << ", nhead=" << self_attn_->num_heads()
    << ", dim_feedforward=" << options_.dim_feedforward << ", dropout=" << options_.dropout
    << ", norm_first=" << (options_.norm_first ? "true" : "false") << ")";
  return s.str();
}

}  // namespace mixgrad::nn
