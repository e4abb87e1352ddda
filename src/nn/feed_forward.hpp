// The feed-forward block shared by the transformer layers (encoder and
// decoder): linear2(dropout(activation(linear1(x)))). Each layer keeps its
// own Linear and Dropout children, so that their state-dict names stay
// PyTorch's (linear1.*, linear2.*), and adds its own trailing dropout.
#pragma once

#include <memory>
#include <string>

#include "mixgrad/nn/transformer.hpp"

namespace mixgrad::nn::detail {

/// ReLU, exact GELU or tanh-GELU of x.
Tensor activate(Activation activation, const Tensor& x);

/// linear2(dropout(activate(activation, linear1(x)))).
Tensor feed_forward(Linear& linear1, Dropout& dropout, Linear& linear2, Activation activation, const Tensor& x);

/// Registers the block's children in PyTorch's order and under its names
/// (linear1, dropout, linear2) through `reg`, the layer's register_module
/// wrapped in a lambda (it is protected), and sets the layer's handles.
template <class Register>
void register_feed_forward(Register&& reg, int64_t d_model, const TransformerEncoderLayerOptions& options,
                           std::shared_ptr<Linear>& linear1, std::shared_ptr<Dropout>& dropout,
                           std::shared_ptr<Linear>& linear2) {
  linear1 = reg("linear1", Linear(d_model, options.dim_feedforward, {.bias = options.bias}));
  dropout = reg("dropout", Dropout(options.dropout));
  linear2 = reg("linear2", Linear(options.dim_feedforward, d_model, {.bias = options.bias}));
}

/// "<layer>(d_model=..., nhead=..., dim_feedforward=..., dropout=..., norm_first=...)".
std::string describe_layer(const char* layer, const MultiheadAttention& self_attn,
                           const TransformerEncoderLayerOptions& options);

}  // namespace mixgrad::nn::detail
