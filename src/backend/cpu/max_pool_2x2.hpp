// Max pooling with 2 x 2 windows, stride 2, no padding (the pooling of most
// convolutional nets), on [N, C, H, W] data of any floating dtype, laid out
// contiguous or channels-last (both tensors alike; the winners as the output).
// The forward records which of the four inputs won (one byte per output:
// 0 top left, 1 top right, 2 bottom left, 3 bottom right); the backward
// writes every input gradient once from it, so there is no zero fill and no
// scatter. Ties go to the first input in that order; a NaN wins over
// numbers (the first NaN), as in the other max-pooling paths.
//
//   if (cpu::max_pool_2x2::applies(p)) {
//     cpu::max_pool_2x2::forward(x, y, winners);  // winners: y.shape(), 1 byte each
//     cpu::max_pool_2x2::backward(gy, winners, gx);
//   }
#pragma once

#include "backend/pooling.hpp"

namespace mixgrad::backend::cpu::max_pool_2x2 {

/// True for kernel 2 x 2, stride 2 x 2, padding 0.
bool applies(const Pool2dParams& p);

/// y = the max of each window of x; winners[o] = the position of the max.
void forward(const Tensor& x, const Tensor& y, const Tensor& winners);

/// gx (overwritten) = gy at each window's winner, zero elsewhere (and in a
/// last row or column that no window covers).
void backward(const Tensor& gy, const Tensor& winners, const Tensor& gx);

}  // namespace mixgrad::backend::cpu::max_pool_2x2
