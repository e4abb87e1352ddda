// Backend seam of the 2-d pooling ops (F::max_pool2d, F::avg_pool2d,
// F::adaptive_avg_pool2d). On the CPU: mixgrad's own kernels for 2 x 2 /
// stride 2 max pooling (backend/cpu/max_pool_2x2.hpp), oneDNN pooling for
// float32 and bfloat16 (float16 by way of float32), direct loops otherwise. On
// CUDA: own kernels (backend/cuda/pooling.cu), the argmax workspace. Max pooling's
// forward returns what its backward needs (oneDNN's workspace, or the argmax
// offsets of the built-in path) as a typed payload for the backward closure.
//
//   backend::MaxPoolWorkspace ws = backend::max_pool2d_forward(x, y, params);
//   backend::max_pool2d_backward(gy, ws, gx, params);
#pragma once

#include "backend/dispatch.hpp"
#include "backend/extent2.hpp"

namespace mixgrad::backend {

/// Window geometry; stride is explicit here (the op resolves "0 = kernel").
struct Pool2dParams {
  Extent2 kernel{2, 2};
  Extent2 stride{2, 2};
  Extent2 padding{0, 0};
};

/// Where each max-pooling output came from, in the form of the path that ran
/// the forward; the backward must read it with the same path.
struct MaxPoolWorkspace {
  enum class Kind : uint8_t {
    onednn,  // `data`: oneDNN's workspace bytes (bool tensor), computed in `compute_dtype`
    argmax,  // `data`: int32 offset of the maximum within its input plane, per output
    window2x2,  // `data`: one byte per output, the maximum's position in its 2 x 2 window
  };
  Kind kind = Kind::argmax;
  Tensor data;
  DType compute_dtype = DType::float32;
};

/// y = max over each window of x ([N, C, H, W], one dtype); padded positions
/// never win. Returns what the backward needs. Every function here takes
/// its two tensors both contiguous or both channels-last (NHWC memory, read
/// and written as it lies); a workspace is laid out as its output.
MIXGRAD_STUB(max_pool2d_forward, 1,
             MaxPoolWorkspace(const Tensor& x, const Tensor& y, const Pool2dParams& p));  // on y's device
/// gx (overwritten) = gy routed to the maximal input of each window.
MIXGRAD_STUB(max_pool2d_backward, 2,
             void(const Tensor& gy, const MaxPoolWorkspace& ws, const Tensor& gx,
                  const Pool2dParams& p));  // on gx's device
/// max_pool2d_forward on the built-in path whatever the geometry: y and the
/// `argmax` workspace, which max_pool2d_gather reads (a recorded backward's
/// positions; the paths agree except which of tied maxima wins).
MIXGRAD_STUB(max_pool2d_argmax, 1,
             MaxPoolWorkspace(const Tensor& x, const Tensor& y, const Pool2dParams& p));  // on y's device
/// gy (overwritten) = gx read at each output's maximal input (ws of kind
/// argmax): the adjoint of max_pool2d_backward, the recorded gradient's own backward.
MIXGRAD_STUB(max_pool2d_gather, 2,
             void(const Tensor& gx, const MaxPoolWorkspace& ws, const Tensor& gy));  // on gy's device
/// y = mean over each window of x, counting only positions inside x.
MIXGRAD_STUB(avg_pool2d_forward, 1, void(const Tensor& x, const Tensor& y, const Pool2dParams& p));  // on y's device
/// gx (overwritten) = gy spread evenly over the inside positions of each window.
MIXGRAD_STUB(avg_pool2d_backward, 1,
             void(const Tensor& gy, const Tensor& gx, const Pool2dParams& p));  // on gx's device
/// y[.., i, j] = mean of x over rows [floor(i*H/OH), ceil((i+1)*H/OH)) and
/// the same for columns; OH, OW read from y.
MIXGRAD_STUB(adaptive_avg_pool2d_forward, 1, void(const Tensor& x, const Tensor& y));     // on y's device
MIXGRAD_STUB(adaptive_avg_pool2d_backward, 1, void(const Tensor& gy, const Tensor& gx));  // on gx's device

}  // namespace mixgrad::backend
