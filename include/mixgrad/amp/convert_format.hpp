// mixgrad/amp/convert_format.hpp — MegEngine's amp.convert_module_format and
// amp.convert_tensor_format: a model and its images to channels-last (NHWC
// in memory), the layout oneDNN's and cuDNN's fastest convolutions take.
// Shapes stay [N, C, H, W]; only the memory order changes, and the ops keep
// it (docs/memory_format.md).
//
//   mg::amp::convert_module_format(net);               // 4-d weights channels-last, in place
//   mg::Tensor x = mg::amp::convert_tensor_format(images);
//   mg::Tensor y = net(x);                              // y.suggest_memory_format() == channels_last
#pragma once

#include <string>

#include "mixgrad/nn/module.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::amp {

/// x laid out channels-last (channels_last_3d for a 5-d x): x.contiguous of
/// that format, recorded (the gradient passes through). Throws ShapeError
/// naming the op, the shape and the dtype for any other rank (MegEngine
/// returns such a tensor unchanged).
inline Tensor convert_tensor_format(const Tensor& x) {
  if (x.defined() && x.ndim() != 4 && x.ndim() != 5)
    throw ShapeError(std::string("convert_tensor_format: expected a 4-d [N, C, H, W] or 5-d [N, C, D, H, W] ")
                         .append("tensor, got ")
                         .append(to_string(x.dtype()))
                         .append(to_string(x.shape())));
  return x.contiguous(x.ndim() == 5 ? MemoryFormat::channels_last_3d : MemoryFormat::channels_last);
}

/// Every 4-d parameter and buffer of `module` (and its descendants)
/// channels-last and every 5-d one channels_last_3d, in place
/// (Module::to(MemoryFormat)), as MegEngine's default `inplace=True`; the
/// others are left as they are. Returns `module`.
inline nn::Module& convert_module_format(nn::Module& module) {
  return module.to(MemoryFormat::channels_last).to(MemoryFormat::channels_last_3d);
}

}  // namespace mixgrad::amp
