// oneDNN's 2-d pooling, the fast path of the CPU backend's pooling family
// (backend/cpu/pooling.cpp decides when it runs and falls back to its
// built-in loops). Each function returns false, having written nothing,
// when oneDNN has no kernel for the problem (a dtype other than float32 /
// bfloat16 / float16, or a configuration it lacks). Defined only in builds
// with oneDNN (MIXGRAD_WITH_ONEDNN).
//
//   Tensor ws;
//   if (onednn::pool2d_forward(onednn::PoolKind::max, x, y, p, &ws)) { ...keep ws for the backward... }
#pragma once

#include <cstdint>

#include "backend/pooling.hpp"

namespace mixgrad::backend::onednn {

enum class PoolKind : uint8_t {
  max,
  avg,  // the mean over the window's positions inside the input (padding excluded)
};

/// y = pooling of x (both contiguous NCHW). For max pooling with a non-null
/// `workspace`, sets it to oneDNN's workspace, which the backward needs.
bool pool2d_forward(PoolKind kind, const Tensor& x, const Tensor& y, const Pool2dParams& p, Tensor* workspace);

/// gx (overwritten) = the gradient of the input given gy; max pooling reads
/// the forward's `workspace`, which must come from pool2d_forward with the
/// same shapes, dtype and params.
bool pool2d_backward(PoolKind kind, const Tensor& gy, const Tensor& gx, const Pool2dParams& p,
                     const Tensor* workspace);

}  // namespace mixgrad::backend::onednn
