#include "mixgrad/nn/kv_cache.hpp"

#include <sstream>

#include "hooks/op_hooks.hpp"
#include "core/checks.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::nn {

KVCache::KVCache(int64_t num_heads, int64_t head_dim, const KVCacheOptions& o) {
  if (num_heads < 1 || head_dim < 1 || o.batch < 1 || o.capacity < 1)
    throw ValueError("KVCache: num_heads, head_dim, batch and capacity must be positive, got num_heads " +
                     std::to_string(num_heads) + ", head_dim " + std::to_string(head_dim) + ", batch " +
                     std::to_string(o.batch) + ", capacity " + std::to_string(o.capacity));
  if (!is_floating_point(o.dtype))
    throw DTypeError("KVCache: the dtype must be floating (the one attention runs in), got " +
                     std::string(to_string(o.dtype)));
  const Shape shape{o.batch, num_heads, o.capacity, head_dim};
  keys_ = empty(shape, o.dtype, o.device);
  values_ = empty(shape, o.dtype, o.device);
}

CachedKeysValues KVCache::cached() const {
  return {keys_.narrow(2, 0, length_), values_.narrow(2, 0, length_)};
}

void KVCache::check_append(const std::string& caller, const Shape& kv_shape, Device device) const {
  if (autodiff::is_recording())
    throw StateError(caller + ": a GradManager is recording on this thread, but " + describe() +
                     " is written in place and gradients do not flow through it; run the cached forward under "
                     "autodiff::no_grad (or inference_mode), or the full forward to train");
  if (device != this->device())
    throw DeviceError(caller + ": the input is on " + to_string(device) + ", " + describe() + " on " +
                      to_string(this->device()));
  const bool fits = kv_shape.ndim() == 4 && kv_shape[0] == batch() && kv_shape[1] == num_heads() &&
                    kv_shape[3] == head_dim();
  if (!fits)
    throw ShapeError(caller + ": keys of " + to_string(kv_shape) + " do not fit " + describe() +
                     ", which takes [batch=" + std::to_string(batch()) + ", heads=" + std::to_string(num_heads()) +
                     ", L, head_dim=" + std::to_string(head_dim()) + "]");
  if (kv_shape[2] > remaining())
    throw ShapeError(caller + ": " + std::to_string(kv_shape[2]) + " new positions do not fit in " + describe() +
                     " (" + std::to_string(remaining()) + " left); reset() or crop() it, or make a larger one");
}

CachedKeysValues KVCache::append(const Tensor& k, const Tensor& v, const std::string& caller) {
  core::check_defined("KVCache::append", {&k, &v});
  check_append(caller, k.shape(), k.device());
  if (v.shape() != k.shape() || v.device() != k.device())
    throw ShapeError(caller + ": keys " + core::describe(k) + " and values " + core::describe(v) +
                     " must have one shape and device");
  if (k.dtype() != dtype() || v.dtype() != dtype())
    throw DTypeError(caller + ": keys " + core::describe(k) + " and values " + core::describe(v) + " for " +
                     describe() + "; make the cache in the dtype attention runs in (autocast's low-precision "
                     "dtype under autocast)");
  const int64_t len = k.size(2);
  // Strided copies into the next positions: no allocation, and k / v may be
  // views (the heads of a projection) without a contiguous copy first.
  ops::overwrite(keys_.narrow(2, length_, len), k);
  ops::overwrite(values_.narrow(2, length_, len), v);
  length_ += len;
  return cached();
}

void KVCache::crop(int64_t length) {
  if (length < 0 || length > length_)
    throw ValueError("KVCache::crop: length must be in [0, " + std::to_string(length_) + "], got " +
                     std::to_string(length) + " for " + describe());
  length_ = length;
}

std::string KVCache::describe() const {
  std::ostringstream s;
  s << "KVCache(batch=" << batch() << ", heads=" << num_heads() << ", head_dim=" << head_dim()
    << ", length=" << length_ << "/" << capacity() << ", " << to_string(dtype()) << ", " << to_string(device())
    << ")";
  return s.str();
}

}  // namespace mixgrad::nn
