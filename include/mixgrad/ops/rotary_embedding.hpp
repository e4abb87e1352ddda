// mixgrad/ops/rotary_embedding.hpp — rotary position embeddings (RoPE) from
// given cos / sin tables, in the "rotate_half" layout of GPT-NeoX and Llama
// (Hugging Face's apply_rotary_pos_emb): element i of the head dimension is
// paired with element i + D/2, not with its neighbour i + 1 (GPT-J's
// interleaved layout, which this is not). With c = cos[t, i], s = sin[t, i]:
//
//   y[..., t, i]       = x[..., t, i] * c - x[..., t, i + D/2] * s
//   y[..., t, i + D/2] = x[..., t, i + D/2] * c + x[..., t, i] * s      for i < D/2
//
//   auto [cos, sin] = rope.tables(0, T, q.device());   // see nn::RotaryEmbedding
//   auto q2 = mg::F::rotary_embedding(q, cos, sin);     // q: [B, H, T, D], cos and sin: [T, D/2]
//
// The tables hold each angle once ([..., T, D/2]); Hugging Face's [T, D]
// tables are these, repeated along the last dim.
#pragma once

#include "mixgrad/tensor.hpp"

namespace mixgrad::F {

/// x [..., T, D] (D even) rotated by the angles whose cosines and sines are
/// `cos` and `sin` [..., T, D/2] (the same shape; their leading dims
/// broadcast against x's). The result has x's shape and dtype: a 16-bit x
/// with float32 tables is rotated in float32 and rounded once. Differentiable
/// in x (and in the tables, should they be tracked) through the F:: ops it is
/// made of. ShapeError, DTypeError or DeviceError naming the op and the three
/// tensors for anything else.
Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin);

}  // namespace mixgrad::F
