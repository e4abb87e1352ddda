#include "nn/feed_forward.hpp"

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

}  // namespace mixgrad::nn::detail
