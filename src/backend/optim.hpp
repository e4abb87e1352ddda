// Backend primitives of the optimizers: one fused, in-place update of a
// parameter and its state buffers from its gradient. The element math is in
// kernels/optim.hpp.
#pragma once

#include <cstdint>

#include "backend/dispatch.hpp"

namespace mixgrad::backend {

struct SgdStep {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool first_step = false;  // the momentum buffer is initialised from the gradient
};

struct AdamStep {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  int64_t step = 1;  // 1-based count of this parameter's updates, for bias correction
  bool decoupled = false;
};

namespace cpu {
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdStep& s);
void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const AdamStep& s);
}  // namespace cpu
namespace cuda {
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdStep& s);
void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const AdamStep& s);
}  // namespace cuda

/// param <- SGD(param, grad); momentum_buffer is undefined when momentum == 0.
/// grad may have any floating dtype and strides; buffers are in float32
/// (float64 for float64 parameters) with the parameter's shape.
inline void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdStep& s) {
  MIXGRAD_DISPATCH(param.device(), sgd_update, (param, grad, momentum_buffer, s));
}

/// param <- Adam(param, grad); max_exp_avg_sq is undefined unless AMSGrad.
inline void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                        const Tensor& max_exp_avg_sq, const AdamStep& s) {
  MIXGRAD_DISPATCH(param.device(), adam_update, (param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, s));
}

}  // namespace mixgrad::backend
