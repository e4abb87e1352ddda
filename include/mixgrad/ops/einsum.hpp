// mixgrad/ops/einsum.hpp — Einstein summation, as torch.einsum.
//
//   F::einsum("bij,bjk->bik", {a, b});      // batched matrix product
//   F::einsum("bhqd,bhkd->bhqk", {q, k});   // attention scores
//   F::einsum("...ij->...ji", {x});         // transpose the last two dims
//   F::einsum("ii", {m});                   // trace (implicit output: none)
//   F::einsum("i,j", {u, v});               // outer product (implicit "->ij")
#pragma once

#include <string_view>
#include <vector>

#include "mixgrad/tensor.hpp"

namespace mixgrad::F {

/// The sum over the equation's indices of the products of the operands'
/// elements, with PyTorch's rules: one lowercase or uppercase letter per dim,
/// operands separated by ',', an optional "->" and the output's letters
/// (without it the output has the letters that occur once, in alphabetical
/// order, after the "..." dims). "..." stands for the same broadcast dims in
/// each operand. A letter twice in one operand takes its diagonal; a letter
/// not in the output is summed. Operands are contracted left to right, each
/// pair as one batched matrix product (permute / reshape / matmul), so it is
/// differentiable twice and runs in low precision under autocast, as matmul.
/// ValueError for an equation that does not parse or does not fit the
/// operands (its dims' sizes disagree, a letter repeats in the output or is
/// in no operand); DTypeError / DeviceError for mixed operands.
Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands);

}  // namespace mixgrad::F
