// Pure planning of fused attention on CUDA through cuDNN's scaled
// dot-product attention (the graph API's sdpa / sdpa_backward nodes, built by
// cuda/attention.cpp with the cuDNN frontend): whether cuDNN runs a call, and
// the dims and strides of each tensor it is given. No cuDNN or CUDA header:
// the host tests (tests/cuda/test_cuda_attention_plan.cpp) read the tensors
// through these descriptors with a reference loop, as cuDNN does, and compare
// with the CPU kernel.
//
//   const std::string why = cuda_plan::attention_unsupported(args);   // "" when cuDNN runs it
//   const AttentionPlan plan = cuda_plan::make_attention_plan(args);
//   graph.tensor(Tensor_attributes().set_dim(plan.q.dims).set_stride(plan.q.strides));
//
// What runs on cuDNN: float16 and bfloat16 (float32 and float64 go to the
// composed math, as before), head_dim == value_dim, a multiple of 8 up to
// 128, as many key/value heads as query heads, at least 16 queries (not
// token-by-token decoding), no mask, the causal cut
// (top-left, PyTorch's) and / or an additive floating mask (cuDNN's bias,
// given dense over [L, S] and broadcast over batch and heads where the mask
// is). A boolean mask and everything else take the composed math.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/attention.hpp"
#include "backend/copy.hpp"
#include "core/view.hpp"

namespace mixgrad::backend::cuda_plan {

/// A 4-d tensor of cuDNN's graph API: dims and element strides.
struct GraphDesc4 {
  std::vector<int64_t> dims;     // 4 entries
  std::vector<int64_t> strides;  // 4 entries, elements
};

/// Every tensor of one fused attention call, as cuDNN reads them: q, k, v
/// [N, H, L|S, E] in their own layouts (HeadLayout: strided views read in
/// place); out (and out's gradient, in its layout) and the gradients of q,
/// k and v dense [N, H, L|S, E];
/// stats (the forward's row log-sum-exp, float32) [N, H, L, 1]; bias (the
/// additive mask, dense in q's dtype) [N or 1, H or 1, L, S].
struct AttentionPlan {
  GraphDesc4 q, k, v, out, dq, dk, dv, stats, bias;
  bool has_bias = false;
  bool causal = false;
  float scale = 1.0f;
};

/// The largest head dim cuDNN's fused attention takes here.
inline constexpr int64_t kMaxCudnnHeadDim = 128;
/// Fewer queries than this take the composed math: cuDNN builds one graph
/// per shape (tens of milliseconds), and decoding with a KV cache has a new
/// key length at every token, where the composed math on one query row is
/// a matrix-vector product anyway.
inline constexpr int64_t kMinCudnnQueries = 16;

/// A [n, h, len, dim] operand as cuDNN reads it, in place. Extent-1 dims
/// get the stride a dense tensor would have there: any stride reads the
/// same elements there.
inline GraphDesc4 head_desc(int64_t n, int64_t h, int64_t len, int64_t dim, const HeadLayout& l) {
  const int64_t row = len == 1 ? dim : l.row, head = h == 1 ? len * row : l.head, batch = n == 1 ? h * head : l.batch;
  return GraphDesc4{{n, h, len, dim}, {batch, head, row, 1}};
}

/// Why cuDNN's fused attention does not run `a`, in words for a log line;
/// empty when it does.
inline std::string attention_unsupported(const AttentionArgs& a) {
  const DType t = a.q.dtype();
  if (t != DType::float16 && t != DType::bfloat16) return "dtype " + std::string(to_string(t)) + " (cuDNN takes float16 and bfloat16)";
  if (a.head_dim != a.value_dim) return "value dim differs from the query / key head dim";
  if (a.head_dim % 8 != 0 || a.head_dim > kMaxCudnnHeadDim) return "head dim not a multiple of 8 up to 128";
  if (a.heads != a.kv_heads) return "grouped-query attention";
  if (a.mask_kind == AttentionMask::keep) return "boolean mask";
  for (const GraphDesc4& d : {head_desc(a.n, a.heads, a.q_len, a.head_dim, a.q_layout),
                              head_desc(a.n, a.heads, a.kv_len, a.head_dim, a.k_layout),
                              head_desc(a.n, a.heads, a.kv_len, a.value_dim, a.v_layout)})
    for (int i = 0; i < 3; ++i)
      if (d.strides[i] == 0 || d.strides[i] % 8 != 0) return "a q, k or v stride zero or not a multiple of 8 elements";
  if (a.n <= 0 || a.heads <= 0 || a.q_len <= 0 || a.kv_len <= 0) return "an empty extent";
  if (a.q_len < kMinCudnnQueries) return "fewer than 16 queries (decoding)";
  return {};
}

/// The bias tensor's extents: 1 along the batch and head dims that the mask
/// broadcasts over (stride 0), else the call's; always [L, S].
inline std::array<int64_t, 4> bias_extents(const AttentionArgs& a) {
  return {a.mask_strides[0] == 0 ? 1 : a.n, a.mask_strides[1] == 0 ? 1 : a.heads, a.q_len, a.kv_len};
}

/// Dims and strides of one call (see AttentionPlan). q, k and v are read in
/// place, as their layouts say (a packed projection's heads, a KV cache's
/// first S positions); out and the gradients are dense; the bias is dense
/// in bias_extents(a).
inline AttentionPlan make_attention_plan(const AttentionArgs& a) {
  const int64_t N = a.n, H = a.heads, L = a.q_len, S = a.kv_len, E = a.head_dim;
  AttentionPlan p;
  p.q = head_desc(N, H, L, E, a.q_layout);
  p.k = head_desc(N, H, S, E, a.k_layout);
  p.v = head_desc(N, H, S, E, a.v_layout);
  p.out = head_desc(N, H, L, E, HeadLayout::dense(H, L, E));
  p.dq = p.out;
  p.dk = head_desc(N, H, S, E, HeadLayout::dense(H, S, E));
  p.dv = p.dk;
  p.stats = {{N, H, L, 1}, {H * L, L, 1, 1}};
  p.has_bias = a.mask_kind == AttentionMask::add;
  if (p.has_bias) {
    const auto e = bias_extents(a);
    p.bias = {{e[0], e[1], e[2], e[3]}, {e[1] * L * S, L * S, S, 1}};
  }
  p.causal = a.causal;
  p.scale = static_cast<float>(a.scale);
  return p;
}

/// The additive mask as cuDNN's bias: a dense copy of bias_extents(a) in
/// `dtype` (q's), read from a.mask through a.mask_strides; on a.mask's device.
inline Tensor dense_bias(const AttentionArgs& a, DType dtype) {
  const auto e = bias_extents(a);
  const auto& st = a.mask_strides;
  const Tensor view = view::make(a.mask, Shape{e[0], e[1], e[2], e[3]}, Shape{st[0], st[1], st[2], st[3]});
  Tensor bias = empty(view.shape(), dtype, a.mask.device());
  copy(view, bias);
  return bias;
}

}  // namespace mixgrad::backend::cuda_plan
