// mixgrad/nn/rotary_embedding.hpp — rotary position embeddings (RoPE) for
// attention written by hand: the cos / sin tables of GPT-NeoX and Llama
// (angle of position p and pair i: p * base^(-2i / head_dim)), cached per
// device, and the rotation of queries and keys in the "rotate_half" layout
// (element i paired with i + head_dim/2; see F::rotary_embedding).
//
//   mg::nn::RotaryEmbedding rope(64, {.base = 10000, .max_positions = 2048});
//   auto [q2, k2] = rope(q, k);              // q: [B, H, T, 64], k: [B, Hk, T, 64]; positions 0..T-1
//   auto [q3, k3] = rope(q_new, k_new, 37);  // incremental decoding: the new tokens are positions 37, 38, ...
//   auto y = mg::F::scaled_dot_product_attention(q2, k2, v, {.is_causal = true});
//
// The score of a rotated query at position m and a rotated key at position n
// depends on m - n only: that is what makes the position relative.
//
// It is not a Module: it has no parameters and nothing to save (PyTorch
// implementations keep the tables as non-persistent buffers), so a model
// holds it as a plain member. The tables are float32 (float64 for float64
// inputs), computed in double on the host when a device first needs them;
// the output keeps the input's dtype (bfloat16 in, bfloat16 out, autocast or
// not). Not for concurrent first use from several threads.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "mixgrad/tensor.hpp"

namespace mixgrad::nn {

struct RotaryEmbeddingOptions {
  double base = 10000.0;          // the angle of pair i is position * base^(-2i / head_dim)
  int64_t max_positions = 4096;   // positions 0 .. max_positions - 1 are in the tables
};

class RotaryEmbedding {
 public:
  /// ValueError unless head_dim is positive and even, base is finite and > 1
  /// and max_positions >= 1.
  explicit RotaryEmbedding(int64_t head_dim, const RotaryEmbeddingOptions& options = {});

  /// q and k [B, H, T, head_dim] (each its own B, H and T), rotated as
  /// positions offset, offset + 1, ... along T. Both are checked before
  /// either is rotated: ShapeError for another rank or head dim, or positions
  /// past max_positions; DTypeError for a non-floating tensor; ValueError for
  /// a negative offset. Each message names the module and the tensors.
  std::pair<Tensor, Tensor> operator()(const Tensor& q, const Tensor& k, int64_t offset = 0);
  /// One tensor [B, H, T, head_dim], as above.
  Tensor rotate(const Tensor& x, int64_t offset = 0);

  /// cos and sin [length, head_dim/2] of positions offset .. offset +
  /// length - 1, on `device`, in `dtype` (float32 or float64), for
  /// F::rotary_embedding. Views of the cached tables: do not write to them.
  std::pair<Tensor, Tensor> tables(int64_t offset, int64_t length, Device device = Device::cpu(),
                                   DType dtype = DType::float32);

  int64_t head_dim() const { return head_dim_; }
  const RotaryEmbeddingOptions& options() const { return options_; }
  std::string describe() const;

 private:
  struct Cached {
    Device device;
    DType dtype;
    Tensor cos, sin;  // [max_positions, head_dim/2]
  };
  void check_input(const char* name, const Tensor& x, int64_t offset) const;
  void check_positions(int64_t offset, int64_t length, const std::string& what) const;
  const Cached& cached(Device device, DType dtype);

  int64_t head_dim_;
  RotaryEmbeddingOptions options_;
  std::vector<Cached> cache_;
};

}  // namespace mixgrad::nn
