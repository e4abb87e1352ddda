// oneDNN's 2-d convolution, the fast path of the CPU backend's conv family
// (backend/cpu/conv.cpp decides when it runs and falls back to its built-in
// kernels). Each function returns false, having written nothing, when oneDNN
// has no kernel for the problem (a dtype other than float32 / bfloat16 /
// float16, or a configuration it lacks). Defined only in builds with oneDNN
// (MIXGRAD_WITH_ONEDNN); the arguments are those of backend/conv.hpp.
//
//   if (onednn::use_for(work) && onednn::conv2d_forward(x, w, bias, y, p)) return;
//   ...built-in path...
#pragma once

#include "backend/conv.hpp"

namespace mixgrad::backend::onednn {

bool conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, const Conv2dParams& p);
bool conv2d_backward_data(const Tensor& gy, const Tensor& w, const Tensor& gx, const Conv2dParams& p);
bool conv2d_backward_weights(const Tensor& gy, const Tensor& x, const Tensor& gw, const Tensor& gbias,
                             const Conv2dParams& p);

}  // namespace mixgrad::backend::onednn
