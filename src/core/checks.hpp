// How errors show a tensor, and the checks of inputs that every layer makes
// (ops, modules, optimizers, the scaler, data loading, checkpoints):
//
//   throw ShapeError(std::string(op) + ": expected a matrix, got " + core::describe(x));   // "float32[2, 3, 4]"
//   core::check_defined("linear", {&x, &w});
#pragma once

#include <initializer_list>
#include <string>

#include "mixgrad/tensor.hpp"

namespace mixgrad::core {

/// "float32[2, 3]", "bfloat16[4]@cuda:0", "undefined": how errors show a tensor.
std::string describe(const Tensor& t);

/// Throws StateError "op: input i is undefined" for an undefined tensor.
void check_defined(const char* op, std::initializer_list<const Tensor*> inputs);
/// Throws DeviceError unless all defined tensors share a device.
void check_same_device(const char* op, std::initializer_list<const Tensor*> inputs);
/// Throws DTypeError unless t is floating.
void check_floating(const char* op, const Tensor& t);

}  // namespace mixgrad::core
