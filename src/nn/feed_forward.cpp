#include "nn/feed_forward.hpp"

#include <sstream>

#include "mixgrad/ops/elementwise.hpp"

namespace mixgrad::nn::detail {

Tensor activate(Activation activation, const Tensor& x) {
  switch (activation) {
    case Activation::relu: return F::relu(x);
    case Activation::gelu: return F::gelu(x);
    case Activation::gelu_tanh: return F::gelu(x, F::GeluApproximation::tanh);
  }
  return x;  // not reached: every enumerator is handled above
}

Tensor feed_forward(Linear& linear1, Dropout& dropout, Linear& linear2, Activation activation, const Tensor& x) {
  return linear2(dropout(activate(activation, linear1(x))));
}

std::string describe_layer(const char* layer, const MultiheadAttention& self_attn,
                           const TransformerEncoderLayerOptions& options) {
  std::ostringstream s;
  s << layer << "(d_model=" << self_attn.embed_dim() << ", nhead=" << self_attn.num_heads()
    << ", dim_feedforward=" << options.dim_feedforward << ", dropout=" << options.dropout
    << ", norm_first=" << (options.norm_first ? "true" : "false") << ")";
  return s.str();
}

}  // namespace mixgrad::nn::detail
