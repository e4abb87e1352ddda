// mixgrad/ops/addmm_activation.hpp — addmm followed by relu or gelu, as
// PyTorch's _addmm_activation (the epilogue cuBLASLt fuses).
//
//   F::addmm_activation(bias, x, w);                        // relu(bias + x·w)
//   F::addmm_activation(bias, x, w, {}, /*use_gelu=*/true); // gelu (erf form)
#pragma once

#include "mixgrad/ops/linalg.hpp"

namespace mixgrad::F {

/// relu(addmm(input, mat1, mat2, options)), or its gelu when use_gelu: the
/// exact (erf) gelu, as PyTorch's CPU kernel (its CUDA kernel's cuBLASLt
/// epilogue uses the tanh approximation, within 5e-4 of it). Arguments and errors as addmm's; low
/// precision under autocast on the CPU (PyTorch's CPU list), the inputs'
/// dtype on CUDA.
Tensor addmm_activation(const Tensor& input, const Tensor& mat1, const Tensor& mat2, const AddmmOptions& options = {},
                        bool use_gelu = false);

}  // namespace mixgrad::F
