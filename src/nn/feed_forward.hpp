// The feed-forward block shared by the transformer layers (encoder and
// decoder): linear2(dropout(activation(linear1(x)))). Each layer keeps its
// own Linear and Dropout children, so that their state-dict names stay
// PyTorch's (linear1.*, linear2.*), and adds its own trailing dropout.
#pragma once

#include <string>

#include "mixgrad/nn/transformer.hpp"

namespace mixgrad::nn::detail {

/// ReLU, exact GELU or tanh-GELU of x.
Tensor activate(Activation activation, const Tensor& x);

/// linear2(dropout(activate(activation, linear1(x)))).
Tensor feed_forward(Linear& linear1, Dropout& dropout, Linear& linear2, Activation activation, const Tensor& x);

/// "<layer>(d_model=..., nhead=..., dim_feedforward=..., dropout=..., norm_first=...)".
std::string describe_layer(const char* layer, const MultiheadAttention& self_attn,
                           const TransformerEncoderLayerOptions& options);

}  // namespace mixgrad::nn::detail
