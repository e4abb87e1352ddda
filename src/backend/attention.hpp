// Backend seam of fused scaled dot-product attention (flash attention): the
// scores are made, masked, softmaxed and applied one block at a time, so no
// [L, S] matrix is ever stored. The forward saves each row's log-sum-exp of
// the scores; the backward recomputes the scores from it.
//
// Shapes: q [N, H, L, E], k [N, Hk, S, E], v [N, Hk, S, Ev] with H a
// multiple of Hk (query head h reads key/value head h / (H / Hk)). q, k
// and v are read in place wherever their last dim has unit stride, as
// their HeadLayouts say: the heads of a packed [N, L, 3E] projection
// (rows 3E apart), a KV cache's first S of its capacity positions.
// Everything is computed in the accumulation dtype (float32; float64 for
// float64 inputs) and rounded once into the outputs.
//
//   if (!backend::attention_forward(args, {.out = o, .lse = lse})) ...composed math...
//   backend::attention_backward(args, {.out = o, .lse = lse}, grad_out, {.q = dq, .k = dk, .v = dv});
#pragma once

#include <array>
#include <cstdint>

#include "backend/dispatch.hpp"

namespace mixgrad::backend {

/// How the mask enters the scores: S = scale * q k^T, then
/// none: S; causal: key j only for query i >= j (PyTorch's top-left
/// alignment); keep: S where the mask is true, else -inf; add: S + mask.
enum class AttentionMask : uint8_t { none, keep, add };

/// Where one [N, H, len, dim] operand's elements lie: (n, h, i, c) at
/// n * batch + h * head + i * row + c elements from its first.
struct HeadLayout {
  int64_t batch = 0, head = 0, row = 0;
  /// The layout of a contiguous [n, heads, len, dim] tensor.
  static HeadLayout dense(int64_t heads, int64_t len, int64_t dim) { return {heads * len * dim, len * dim, dim}; }
};

struct AttentionArgs {
  Tensor q, k, v;
  /// bool (keep) or the accumulation dtype (add); any strides, read through
  /// `mask_strides` (elements, for [N, H, L, S]; 0 along broadcast dims).
  Tensor mask;
  AttentionMask mask_kind = AttentionMask::none;
  std::array<int64_t, 4> mask_strides{};
  bool causal = false;
  double scale = 1.0;
  int64_t n = 0, heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, head_dim = 0, value_dim = 0;
  /// How q, k and v lie in memory (their last dim always of unit stride).
  HeadLayout q_layout, k_layout, v_layout;
};
inline Device device_of(const AttentionArgs& a) { return a.q.device(); }  // the kernels' device

/// What the forward writes (and the backward reads).
struct AttentionOutputs {
  Tensor out;  // [N, H, L, Ev], q's dtype, contiguous (as the output gradient)
  Tensor lse;  // [N, H, L], accumulation dtype; -inf for a row that sees no key
};

/// What the backward writes; undefined members are not computed.
struct AttentionGrads {
  Tensor q, k, v;  // their inputs' shapes and dtypes, contiguous
};

namespace cuda {  // the cuDNN SDPA (cuda/attention.cpp) around the CUDA kernels
/// Forward and backward calls cuDNN has run in this process (for tests).
int64_t fused_attention_runs();
/// Whether cuDNN's fused attention can run on `device`: the build has the
/// cuDNN frontend and the GPU is an Ampere (8.0) or later.
bool fused_attention_available(int device);
}  // namespace cuda

/// out = softmax(mask(scale q k^T)) v, row by row; a row whose every key is
/// masked is 0 (and its lse -inf). False when the device's fused kernel does
/// not take the call (on CUDA: what cuDNN does not support,
/// cuda_plan::attention_unsupported), having written nothing: the op then
/// runs the composed math. The CPU's takes every call.
MIXGRAD_STUB(attention_forward, 0, bool(const AttentionArgs& a, const AttentionOutputs& o));  // on a.q's device

/// The gradients of q, k and v from the saved output and lse; false (nothing
/// written) when the device's fused kernel does not take the call.
MIXGRAD_STUB(attention_backward, 0,
             bool(const AttentionArgs& a, const AttentionOutputs& saved, const Tensor& grad_out,
                  const AttentionGrads& grads));  // on a.q's device

}  // namespace mixgrad::backend
