// mixgrad/ops/conv1d_variants.hpp — the 1-d convolutions beyond conv1d:
// conv_transpose1d and conv_tbc (time, batch, channel), as PyTorch's.
//
//   F::conv_transpose1d(x, w, b, {.stride = 2, .padding = 1});   // x: [N, C, L]
//   F::conv_tbc(x, w, b, 1);                                      // x: [T, N, C]
#pragma once

#include "mixgrad/tensor.hpp"

namespace mixgrad::F {

struct ConvTranspose1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t output_padding = 0;  // < stride (or < dilation)
  int64_t dilation = 1;
  int64_t groups = 1;
};
/// The adjoint of conv1d, as PyTorch's conv_transpose1d: x [N, C, L] or
/// [C, L], weight [C, O/groups, K], bias [O] or undefined. Output length
/// (L - 1)*stride - 2*padding + dilation*(K-1) + output_padding + 1. Runs as
/// conv_transpose2d on height-1 views; low precision under autocast.
Tensor conv_transpose1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                        const ConvTranspose1dOptions& options = {});

/// PyTorch's conv_tbc: a 1-d convolution of x [T, N, C_in] (time first)
/// with weight [K, C_in, C_out] and bias [C_out], `pad` zeros at both ends
/// of time: [T + 2*pad - K + 1, N, C_out]. Runs as conv1d; low precision
/// under autocast.
Tensor conv_tbc(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t pad = 0);

}  // namespace mixgrad::F
