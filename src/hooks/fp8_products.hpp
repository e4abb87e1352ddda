// The hook through which F::linear and F::matmul reach FP8 regions
// (mixgrad/amp/fp8.hpp), declared here (below ops) and implemented in
// src/amp/fp8.cpp, so that ops include nothing of amp:
//
//   if (amp::detail::fp8_active()) return amp::detail::fp8_linear(x, w, b);
#pragma once

#include "mixgrad/tensor.hpp"

namespace mixgrad::amp::detail {

/// True when an FP8 region is open and enabled on this thread, outside the
/// products an FP8 site itself runs.
bool fp8_active();

/// The FP8 forms of F::linear and F::matmul, for operands the ops have
/// checked (shapes, devices, floating dtypes); recorded like them.
Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
Tensor fp8_matmul(const Tensor& a, const Tensor& b);

}  // namespace mixgrad::amp::detail
