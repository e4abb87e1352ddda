// mixgrad/ops/attention.hpp — scaled dot-product attention, with PyTorch's
// semantics (torch.nn.functional.scaled_dot_product_attention).
//
//   Tensor y = F::scaled_dot_product_attention(q, k, v, {.is_causal = true});
//   Tensor y = F::scaled_dot_product_attention(q, k, v, {.attn_mask = keep, .dropout_p = 0.1});
//   Tensor y = F::scaled_dot_product_attention(q, k, v, {.enable_gqa = true});   // k, v with fewer heads
//
// q: [..., H, L, E], k: [..., Hk, S, E], v: [..., Hk, S, Ev], the same
// floating dtype; the leading dims equal. Output [..., H, L, Ev]:
//
//   softmax(q k^T * scale + mask) v,   scale = 1 / sqrt(E) unless given,
//
// where the mask is a bool tensor (true: the query attends to the key; false
// adds -inf) or a floating one added to the scores, broadcastable to
// [..., H, L, S]; is_causal lets query i see keys j <= i (PyTorch's top-left
// alignment) and excludes attn_mask. A query that sees no key at all gets
// 0 (PyTorch >= 2.5 does the same), not NaN.
//
// On the CPU, without dropout, it runs a fused flash-attention kernel:
// blocks of scores with an online softmax in float32 (float64 for float64
// inputs), memory linear in the sequence length, and a backward that
// recomputes the scores from the saved row log-sum-exp. Elsewhere (dropout,
// CUDA) it runs the same math as matmul / softmax / matmul ops. Autocast runs
// it in the low-precision dtype, its softmax statistics in float32. It is
// twice differentiable (the second backward runs the composed math).
#pragma once

#include <optional>

#include "mixgrad/tensor.hpp"

namespace mixgrad::F {

struct AttentionOptions {
  /// bool (true: attend) or floating (added), broadcastable to [..., H, L, S].
  Tensor attn_mask{};
  /// Probability of dropping an attention weight (training only: pass 0 to evaluate).
  double dropout_p = 0.0;
  /// Query i attends to keys 0..i. Not together with attn_mask.
  bool is_causal = false;
  /// Multiplies q k^T; 1 / sqrt(E) when unset.
  std::optional<double> scale{};
  /// Grouped-query attention: H a multiple of Hk, query head h reads
  /// key/value head h / (H / Hk).
  bool enable_gqa = false;
};

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const AttentionOptions& options = {});

}  // namespace mixgrad::F
