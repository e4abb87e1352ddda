// Backend seam of F::conv2d: forward, backward-data and backward-weights as
// three calls, as the libraries (oneDNN, cuDNN) structure them. On the CPU:
// oneDNN convolution for float32 and bfloat16 (float16 by way of float32),
// im2col + the built-in gemm for float64 and without oneDNN. On CUDA:
// cuDNN's legacy convolution calls (backend/cuda/conv.cpp), every floating
// dtype; a DeviceError naming cuDNN when the build has none.
//
//   backend::conv2d_forward(x, w, b, y, params);
//   backend::conv2d_backward_data(gy, w, gx, params);
//   backend::conv2d_backward_weights(gy, x, gw, gb, params);
#pragma once

#include "backend/dispatch.hpp"
#include "backend/extent2.hpp"

namespace mixgrad::backend {

/// Geometry of a 2-d convolution (dilation 1 = dense kernel).
struct Conv2dParams {
  Extent2 stride{1, 1};
  Extent2 padding{0, 0};
  Extent2 dilation{1, 1};
  int64_t groups = 1;
};

/// y[N, O, OH, OW] = conv(x[N, C, H, W], w[O, C/groups, KH, KW]) + bias[O].
/// x, w, y dense, one dtype: each contiguous or channels-last (the
/// activations x and y both in one of them), read and written as they lie;
/// bias undefined or [O] (any floating dtype).
/// On the CPU the three calls also take float32 operands or results beside
/// 16-bit ones (autocast's float32 weights where 16-bit math is missing),
/// all computed in float32.
MIXGRAD_STUB(conv2d_forward, 3,
             void(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                  const Conv2dParams& p));  // on y's device

/// gx = the gradient of the input given gy (overwritten), laid out as the forward's.
MIXGRAD_STUB(conv2d_backward_data, 2,
             void(const Tensor& gy, const Tensor& w, const Tensor& gx, const Conv2dParams& p));  // on gx's device

/// gw (and gbias when defined) = the gradients of weight and bias given gy and
/// the forward input x (overwritten), laid out as the forward's.
MIXGRAD_STUB(conv2d_backward_weights, 2,
             void(const Tensor& gy, const Tensor& x, const Tensor& gw, const Tensor& gbias,
                  const Conv2dParams& p));  // on gw's device

}  // namespace mixgrad::backend
