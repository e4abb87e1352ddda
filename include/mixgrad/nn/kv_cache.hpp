// mixgrad/nn/kv_cache.hpp — the keys and values a decoder has already
// computed, kept so that generating the next token projects only that token.
//
//   mg::autodiff::inference_mode guard;                 // the cache is for inference
//   mg::amp::autocast ac(true, mg::DType::bfloat16);
//   auto cache = layer.make_kv_cache(/*batch=*/1, /*capacity=*/block, mg::DType::bfloat16);
//   auto h = layer.forward(prompt_x, cache);            // [1, P, E]: the prompt once
//   auto y = layer.forward(next_x, cache);              // [1, 1, E]: attends to keys 0..P
//   cache.reset();                                      // a new sequence, same memory
//
// One KVCache serves one attention layer: a decoder of n layers keeps n of
// them. Its length is one for the whole batch: prompts of different lengths
// are left-padded and masked (MultiheadAttention::forward(x, cache,
// key_padding_mask)). Keys and values are stored as [batch, heads, capacity, head_dim] in
// one dtype on one device, allocated once at construction: appending writes
// into the next positions, never reallocates. The dtype is the one attention
// runs in: the low-precision dtype under autocast (the projections' output
// dtype), else the model's.
//
// A cache is written in place, outside the tape: gradients do not flow
// through it. It refuses to append while a GradManager records on this
// thread (StateError); use it under autodiff::no_grad / inference_mode.
// Every error (capacity, batch, heads, head_dim, dtype, device) is thrown
// before anything is written: the cache is as it was.
#pragma once

#include <cstdint>
#include <string>

#include "mixgrad/tensor.hpp"

namespace mixgrad::nn {

struct KVCacheOptions {
  int64_t batch = 1;
  /// Positions the cache holds: the longest sequence (a GPT's block size).
  int64_t capacity = 0;
  /// The dtype keys and values arrive in: autocast's low-precision dtype
  /// when the model runs under autocast, else the parameters' dtype.
  DType dtype = DType::float32;
  Device device = Device::cpu();
};

/// Keys and values of positions [0, length()) and what they attend with.
struct CachedKeysValues {
  Tensor keys;    // [batch, heads, length, head_dim], a view of the cache
  Tensor values;  // the same
};

class KVCache {
 public:
  /// Allocates keys and values of [batch, num_heads, capacity, head_dim].
  /// ValueError unless every extent is positive; DTypeError unless dtype is
  /// floating; OutOfMemoryError when the memory is not there.
  KVCache(int64_t num_heads, int64_t head_dim, const KVCacheOptions& options);

  // Two handles on one buffer would each believe they own its positions.
  KVCache(const KVCache&) = delete;
  KVCache& operator=(const KVCache&) = delete;
  KVCache(KVCache&&) noexcept = default;
  KVCache& operator=(KVCache&&) noexcept = default;

  /// Positions filled: the position of the next token appended.
  int64_t length() const { return length_; }
  /// Positions left before the cache is full.
  int64_t remaining() const { return capacity() - length_; }
  int64_t capacity() const { return keys_.size(2); }
  int64_t batch() const { return keys_.size(0); }
  int64_t num_heads() const { return keys_.size(1); }
  int64_t head_dim() const { return keys_.size(3); }
  DType dtype() const { return keys_.dtype(); }
  Device device() const { return keys_.device(); }

  /// The filled positions, as views (no copy).
  CachedKeysValues cached() const;

  /// Throws, as append() would for keys of `kv_shape` ([batch, heads, L,
  /// head_dim]) on `device`, every error but the dtype's: lets a module
  /// refuse before it computes anything. `caller` starts the message.
  void check_append(const std::string& caller, const Shape& kv_shape, Device device) const;

  /// Writes k and v ([batch, heads, L, head_dim], the cache's dtype and
  /// device, any strides) at positions [length(), length() + L) and returns
  /// all filled positions. ShapeError when L positions do not fit in the
  /// capacity left or an extent differs, DTypeError / DeviceError on a
  /// mismatch, StateError while a GradManager records; nothing is written
  /// then. `caller` names the module in those messages.
  CachedKeysValues append(const Tensor& k, const Tensor& v, const std::string& caller = "KVCache::append");

  /// Forgets every position (keeps the memory): the start of a new sequence.
  void reset() { length_ = 0; }
  /// Keeps positions [0, length) only (HF's crop): to roll back a step or
  /// drop a draft. ValueError unless 0 <= length <= length().
  void crop(int64_t length);

  /// "KVCache(batch=1, heads=4, head_dim=32, length=5/128, bfloat16, cpu)".
  std::string describe() const;

 private:
  Tensor keys_, values_;
  int64_t length_ = 0;
};

}  // namespace mixgrad::nn
