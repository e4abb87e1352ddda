// Backend primitives every op uses: strided copy with dtype conversion, fill,
// accumulate, and the copy between devices. CPU: cpu/copy.cpp; CUDA:
// cuda/copy.cu.
#pragma once

#include "backend/dispatch.hpp"

namespace mixgrad::backend {

namespace cuda {
void transfer(const Tensor& src, const Tensor& dst);
}  // namespace cuda

/// Throws ShapeError (DeviceError) naming `op`: src does not have dst's
/// shape (device). The kernels walk dst's shape through both tensors'
/// strides, so a mismatch would read out of bounds.
[[noreturn]] void throw_mismatch(const char* op, const Tensor& dst, const Tensor& src);

/// The kernels of copy and accumulate below, which check their arguments first.
MIXGRAD_STUB(copy_kernel, 1, void(const Tensor& src, const Tensor& dst));        // on dst's device
MIXGRAD_STUB(accumulate_kernel, 0, void(const Tensor& dst, const Tensor& src));  // on dst's device

/// dst[i] = convert(src[i]); same shape, any strides and dtypes, same device.
inline void copy(const Tensor& src, const Tensor& dst) {
  if (dst.shape() != src.shape() || dst.device() != src.device()) [[unlikely]]
    throw_mismatch("copy", dst, src);
  copy_kernel(src, dst);
}

/// Every element of dst (any strides) set to value.
MIXGRAD_STUB(fill, 0, void(const Tensor& dst, double value));  // on dst's device

/// dst += src elementwise; same shape and device, src converted to dst's
/// dtype (else throw_mismatch).
inline void accumulate(const Tensor& dst, const Tensor& src) {
  if (dst.shape() != src.shape() || dst.device() != src.device()) [[unlikely]]
    throw_mismatch("accumulate", dst, src);
  accumulate_kernel(dst, src);
}

/// dst = src where one of them is on a CUDA device (or they are on two):
/// same shape and dtype, both contiguous.
inline void transfer(const Tensor& src, const Tensor& dst) {
#if MIXGRAD_WITH_CUDA
  cuda::transfer(src, dst);
#else
  (void)dst;
  throw_no_cuda(src.device().is_cpu() ? "copy to a cuda device" : "copy from a cuda device");
#endif
}

/// The elements of a kernel's output: the handle is const, its data is not.
template <class T>
T* writable(const Tensor& t) {
  return Tensor(t).data<T>();
}

/// Byte strides of a tensor, for the strided loops.
inline Shape byte_strides(const Tensor& t) {
  Shape s = t.strides();
  for (int i = 0; i < s.ndim(); ++i) s[i] *= element_size(t.dtype());
  return s;
}

}  // namespace mixgrad::backend
