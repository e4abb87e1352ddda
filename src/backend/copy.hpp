// Backend primitives every op uses: strided copy with dtype conversion, fill.
#pragma once

#include "backend/dispatch.hpp"

namespace mixgrad::backend {

namespace cpu {
void copy(const Tensor& src, const Tensor& dst);
void fill(const Tensor& dst, double value);
void accumulate(const Tensor& dst, const Tensor& src);
}  // namespace cpu
namespace cuda {
void copy(const Tensor& src, const Tensor& dst);
void fill(const Tensor& dst, double value);
void accumulate(const Tensor& dst, const Tensor& src);
}  // namespace cuda

/// dst[i] = convert(src[i]); same shape, any strides and dtypes, same device.
inline void copy(const Tensor& src, const Tensor& dst) { MIXGRAD_DISPATCH(dst.device(), copy, (src, dst)); }
/// Every element of dst (any strides) set to value.
inline void fill(const Tensor& dst, double value) { MIXGRAD_DISPATCH(dst.device(), fill, (dst, value)); }

/// dst += src elementwise; same shape, src converted to dst's dtype.
inline void accumulate(const Tensor& dst, const Tensor& src) { MIXGRAD_DISPATCH(dst.device(), accumulate, (dst, src)); }

/// Byte strides of a tensor, for the strided loops.
inline Shape byte_strides(const Tensor& t) {
  Shape s = t.strides();
  for (int i = 0; i < s.ndim(); ++i) s[i] *= element_size(t.dtype());
  return s;
}

}  // namespace mixgrad::backend
