// Pure planning of the CUDA convolution and pooling kernels: the parameters
// cuDNN's legacy descriptors are given (NCHW dims and strides, padding,
// stride, dilation, group count), and the pooling windows the own kernels
// of cuda/pooling.cu walk, forward (the inputs of an output) and backward
// (the outputs whose window holds an input). No cuDNN or CUDA header: the
// host tests (tests/cuda/test_cuda_conv_plan.cpp) run every plan with a
// reference loop against the CPU backend.
//
//   const ConvDescPlan plan = make_conv_desc_plan(x.shape(), w.shape(), y.shape(), params);
//   cudnnSetTensorNdDescriptor(xd, type, 4, plan.x.dims.data(), plan.x.strides.data());
//
// conv1d reaches here as a height-1 conv2d and conv_transpose2d as conv2d's
// backward-data (its x is conv2d's y); ops/conv.cpp makes those views, so
// one 2-d descriptor family serves all three ops.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "backend/conv.hpp"
#include "backend/pooling.hpp"

#if defined(__CUDACC__)
#define MIXGRAD_PLAN_HD __host__ __device__
#else
#define MIXGRAD_PLAN_HD
#endif

namespace mixgrad::backend::cuda_plan {

/// A 4-d tensor descriptor: dims and element strides (NCHW, contiguous or
/// channels-last: NHWC in memory).
struct Desc4 {
  std::array<int, 4> dims{};
  std::array<int, 4> strides{};
};

/// Everything a cuDNN 2-d convolution needs, checked against int range.
struct ConvDescPlan {
  Desc4 x, y;                     // input [N, C, H, W], output [N, O, OH, OW]
  std::array<int, 4> w{};         // filter [O, C / groups, KH, KW], dims in NCHW order
  bool filter_nhwc = false;       // the filter's memory is OHWI (cuDNN's NHWC filter format)
  std::array<int, 2> pad{}, stride{}, dilation{};
  int groups = 1;
};

/// Output extent along one spatial dim: (in + 2p - d (k - 1) - 1) / s + 1, or
/// 0 when the dilated kernel does not fit the padded input.
inline int64_t conv_out_extent(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  const int64_t padded = in + 2 * p, span = d * (k - 1);
  if (span >= padded) return 0;
  return (padded - span - 1) / s + 1;
}

namespace detail {
inline int to_int(int64_t v, const char* what) {
  if (v < 0 || v > std::numeric_limits<int>::max())
    throw ShapeError(std::string("conv2d (CUDA): ") + what + " " + std::to_string(v) +
                     " is beyond cuDNN's 32-bit descriptor range");
  return static_cast<int>(v);
}
inline Desc4 nchw(const Shape& s, const char* what, bool channels_last = false) {
  Desc4 d;
  for (int i = 0; i < 4; ++i) d.dims[i] = to_int(s[i], what);
  // Memory order N, C, H, W, or N, H, W, C: strides from the innermost out.
  const std::array<int, 4> order = channels_last ? std::array<int, 4>{0, 2, 3, 1} : std::array<int, 4>{0, 1, 2, 3};
  int64_t acc = 1;
  for (int i = 3; i >= 0; --i) {
    d.strides[order[i]] = to_int(acc, what);
    acc *= d.dims[order[i]] > 0 ? d.dims[order[i]] : 1;
  }
  return d;
}
}  // namespace detail

/// The descriptors of y = conv(x, w) with geometry p; x, w, y as the backend
/// receives them (4-d, dense): `channels_last` activations x and y are NHWC
/// in memory, a `filter_nhwc` weight OHWI. Throws ShapeError when the shapes
/// do not fit each other (channels, groups, the output-size formula) or
/// exceed cuDNN's int descriptors.
inline ConvDescPlan make_conv_desc_plan(const Shape& x, const Shape& w, const Shape& y, const Conv2dParams& p,
                                        bool channels_last = false, bool filter_nhwc = false) {
  auto fail = [&](const std::string& why) {
    throw ShapeError("conv2d (CUDA): input " + to_string(x) + ", weight " + to_string(w) + ", output " +
                     to_string(y) + ": " + why);
  };
  if (x.ndim() != 4 || w.ndim() != 4 || y.ndim() != 4) fail("expected 4-d operands");
  if (p.groups < 1 || x[1] % p.groups != 0 || w[0] % p.groups != 0 || w[1] * p.groups != x[1])
    fail("channels do not fit groups=" + std::to_string(p.groups));
  if (y[0] != x[0] || y[1] != w[0]) fail("batch or output channels differ");
  const int64_t oh = conv_out_extent(x[2], w[2], p.stride.h, p.padding.h, p.dilation.h);
  const int64_t ow = conv_out_extent(x[3], w[3], p.stride.w, p.padding.w, p.dilation.w);
  if (y[2] != oh || y[3] != ow)
    fail("output extent (" + std::to_string(oh) + ", " + std::to_string(ow) + ") expected from the geometry");
  ConvDescPlan plan;
  plan.x = detail::nchw(x, "input extent", channels_last);
  plan.y = detail::nchw(y, "output extent", channels_last);
  plan.filter_nhwc = filter_nhwc;
  for (int i = 0; i < 4; ++i) plan.w[i] = detail::to_int(w[i], "weight extent");
  plan.pad = {detail::to_int(p.padding.h, "padding"), detail::to_int(p.padding.w, "padding")};
  plan.stride = {detail::to_int(p.stride.h, "stride"), detail::to_int(p.stride.w, "stride")};
  plan.dilation = {detail::to_int(p.dilation.h, "dilation"), detail::to_int(p.dilation.w, "dilation")};
  plan.groups = detail::to_int(p.groups, "groups");
  return plan;
}

/// The index of the result of a cuDNN `_v7` heuristic (perf[0, n)) to run:
/// the first whose status is `success` and whose workspace fits
/// `max_workspace`, and, where `only_math` is not negative, whose math type
/// is that one (float32 asks for FMA results only: no TF32); -1 when none
/// fits. The caller puts the result's math type on the convolution
/// descriptor with its algorithm. Perf is any of cuDNN's *AlgoPerf_t (its
/// status, memory and mathType members).
template <class Perf>
int usable_algorithm(const Perf* perf, int n, int success, size_t max_workspace, int only_math) {
  for (int i = 0; i < n; ++i) {
    if (only_math >= 0 && static_cast<int>(perf[i].mathType) != only_math) continue;
    if (static_cast<int>(perf[i].status) == success && perf[i].memory <= max_workspace) return i;
  }
  return -1;
}

// ---- pooling windows ------------------------------------------------------

/// Half-open input range of output o along one axis of a fixed-window pool
/// (padded positions excluded); empty when the window lies in the padding.
MIXGRAD_PLAN_HD inline void fixed_window(int64_t o, int64_t kernel, int64_t stride, int64_t padding, int64_t in,
                                         int64_t& first, int64_t& last) {
  const int64_t b = o * stride - padding;
  first = b > 0 ? b : 0;
  last = b + kernel < in ? b + kernel : in;
}

/// Half-open range of the outputs whose fixed window holds input i.
MIXGRAD_PLAN_HD inline void fixed_outputs_of(int64_t i, int64_t kernel, int64_t stride, int64_t padding, int64_t out,
                                             int64_t& first, int64_t& last) {
  // o s - p <= i < o s - p + k  <=>  (i + p - k) / s < o <= (i + p) / s
  const int64_t lo = i + padding - kernel;
  first = lo < 0 ? 0 : lo / stride + 1;
  const int64_t hi = (i + padding) / stride + 1;
  last = hi < out ? hi : out;
  if (last < first) last = first;
}

/// Half-open input range of output o of an adaptive pool:
/// [floor(o in / out), ceil((o + 1) in / out)).
MIXGRAD_PLAN_HD inline void adaptive_window(int64_t o, int64_t in, int64_t out, int64_t& first, int64_t& last) {
  first = o * in / out;
  last = ((o + 1) * in + out - 1) / out;
}

/// Half-open range of the outputs whose adaptive window holds input i:
/// [floor(i out / in), ceil((i + 1) out / in)).
MIXGRAD_PLAN_HD inline void adaptive_outputs_of(int64_t i, int64_t in, int64_t out, int64_t& first, int64_t& last) {
  first = i * out / in;
  last = ((i + 1) * out + in - 1) / in;
  if (last > out) last = out;
}

/// The maximum of a max-pooling window as the CPU's built-in path picks it
/// (backend/cpu/pooling.cpp), which the argmax workspace records: the window
/// [h0, h1) x [w0, w1) of a plane of width `width` is walked in row-major
/// order and a value replaces the best so far when it is greater, or when it
/// is NaN and the best is not. So the first of tied maxima wins, the first
/// NaN beats everything, and -inf is a maximum like any other. Returns the
/// winner's offset in its plane (row * width + column), or -1 for an empty
/// window (wholly in the padding); `load(offset)` reads a value in the
/// compute type A.
template <class A, class Load>
MIXGRAD_PLAN_HD inline int64_t window_argmax(int64_t h0, int64_t h1, int64_t w0, int64_t w1, int64_t width,
                                             const Load& load) {
  int64_t best_at = -1;
  A best = A(0);
  for (int64_t ih = h0; ih < h1; ++ih)
    for (int64_t iw = w0; iw < w1; ++iw) {
      const A v = load(ih * width + iw);
      if (best_at < 0 || v > best || (v != v && best == best)) {  // v != v: NaN, without fast-math's help
        best = v;
        best_at = ih * width + iw;
      }
    }
  return best_at;
}

}  // namespace mixgrad::backend::cuda_plan
