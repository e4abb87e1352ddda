#include "mixgrad/nn/transformer.hpp"


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
  detail::register_feed_forward([this](const char* name, auto m) { return register_module(name, std::move(m)); },
                                d_model, options, linear1_, dropout_, linear2_);
  const LayerNormOptions ln{.eps = options.layer_norm_eps, .bias = options.bias};
  norm1_ = register_module("norm1", LayerNorm(d_model, ln));
  norm2_ = register_module("norm2", LayerNorm(d_model, ln));
  dropout1_ = register_module("dropout1", Dropout(options.dropout));
  dropout2_ = register_module("dropout2", Dropout(options.dropout));
}

Tensor TransformerEncoderLayer::feed_forward(const Tensor& x) {
  return (*dropout2_)(detail::feed_forward(*linear1_, *dropout_, *linear2_, options_.activation, x));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src) { return forward(src, {}); }

Tensor TransformerEncoderLayer::residual_blocks(const Tensor& src,
                                                const std::function<Tensor(const Tensor&)>& attend) {
  auto sa = [&](const Tensor& x) { return (*dropout1_)(attend(x)); };
  Tensor x = src;
  if (options_.norm_first) {
    x = F::add(x, sa((*norm1_)(x)));
    return F::add(x, feed_forward((*norm2_)(x)));
  }
  x = (*norm1_)(F::add(x, sa(x)));
  return (*norm2_)(F::add(x, feed_forward(x)));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const AttentionMasks& masks) {
  return residual_blocks(src, [&](const Tensor& x) { return self_attn_->forward(x, x, x, masks); });
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, KVCache& cache, const Tensor& key_padding_mask) {
  const int64_t past = cache.length();
  try {
    return residual_blocks(src, [&](const Tensor& x) { return self_attn_->forward(x, cache, key_padding_mask); });
  } catch (...) {
    cache.crop(past);  // the attention appended, a later step threw: roll the positions back
    throw;
  }
}

KVCache TransformerEncoderLayer::make_kv_cache(int64_t batch, int64_t capacity, DType dtype) const {
  return self_attn_->make_kv_cache(batch, capacity, dtype);
}

std::string TransformerEncoderLayer::describe() const { return detail::describe_layer("TransformerEncoderLayer", *self_attn_, options_); }

}  // namespace mixgrad::nn
