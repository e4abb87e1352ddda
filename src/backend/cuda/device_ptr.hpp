// Typed device pointers of CUDA tensors for the kernels' launchers.
// Tensor::data<T>() is for host access and refuses device tensors; this is
// its device-side counterpart, with the same dtype check.
//
//   kernel<<<...>>>(device_ptr<const float>(x), device_ptr<float>(y));
#pragma once

#include <string>
#include <type_traits>

#include "mixgrad/error.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::backend::cuda {

/// The elements of `t` (any device) as T*; DTypeError unless T is t's dtype.
template <class T>
T* device_ptr(const Tensor& t) {
  using U = std::remove_const_t<T>;
  if (dtype_of<U>() != t.dtype())
    throw DTypeError(std::string("cuda kernel: tensor of dtype ") + std::string(to_string(t.dtype())) +
                     " where " + std::string(to_string(dtype_of<U>())) + " was expected");
  return static_cast<T*>(t.raw_data());
}

}  // namespace mixgrad::backend::cuda
