// Backend seam of F::batch_norm over [N, C, ...] (any number of trailing
// spatial dims). Statistics, weight and bias are in the statistics dtype:
// float32, or float64 for float64 input. On the CPU: mixgrad's own
// vectorised kernels (backend/cpu/batch_norm.cpp; see there why not
// oneDNN's). The batch mean and (biased) variance the forward computes are
// what the backward closure keeps; in training the running statistics are
// then updated from them on the device, with no value read on the host.
//
//   backend::batch_norm_forward({.x = x, .weight = w, .bias = b, .mean = m, .var = v, .y = y,
//                                .training = true, .eps = 1e-5});
//   backend::batch_norm_backward({.grad_y = gy, .x = x, .weight = w, .mean = m, .var = v,
//                                 .grad_x = gx, .grad_weight = gw, .grad_bias = gb, .training = true});
//   backend::batch_norm_update_running({.running_mean = rm, .running_var = rv, .mean = m, .var = v,
//                                       .momentum = 0.1, .var_correction = count / (count - 1.0)});
#pragma once

#include "backend/dispatch.hpp"

namespace mixgrad::backend {

struct BatchNormForward {
  Tensor x;       // [N, C, ...] contiguous, any floating dtype
  Tensor weight;  // [C] statistics dtype, or undefined (1)
  Tensor bias;    // [C] statistics dtype, or undefined (0)
  Tensor mean;    // [C] statistics dtype: written in training (batch mean), read otherwise
  Tensor var;     // [C] statistics dtype: written in training (biased batch variance), read otherwise
  Tensor y;       // like x
  bool training = false;
  double eps = 1e-5;
};
inline Device device_of(const BatchNormForward& a) { return a.y.device(); }  // the kernels' device

struct BatchNormBackward {
  Tensor grad_y;       // like x, contiguous
  Tensor x;            // the forward input
  Tensor weight;       // as in the forward
  Tensor mean, var;    // the statistics the forward normalised with
  Tensor grad_x;       // like x, or undefined when not wanted
  Tensor grad_weight;  // [C] statistics dtype, or undefined
  Tensor grad_bias;    // [C] statistics dtype, or undefined
  bool training = false;
  double eps = 1e-5;
};
inline Device device_of(const BatchNormBackward& a) { return a.grad_y.device(); }  // the kernels' device

struct BatchNormRunningUpdate {
  Tensor running_mean;  // [C] any floating dtype, any stride: updated in place
  Tensor running_var;   // [C] likewise
  Tensor mean;          // [C] statistics dtype, contiguous: the batch mean
  Tensor var;           // [C] statistics dtype, contiguous: the biased batch variance
  double momentum = 0.1;
  double var_correction = 1.0;  // count / (count - 1): the variance goes in unbiased
};
inline Device device_of(const BatchNormRunningUpdate& a) { return a.running_mean.device(); }  // the kernels' device

/// y = (x - mean) / sqrt(var + eps) * weight + bias per channel; in training
/// mean / var are the batch statistics, computed here.
MIXGRAD_STUB(batch_norm_forward, 0, void(const BatchNormForward& a));  // on a.y's device

/// The gradients of x, weight and bias (those defined in `a`, overwritten).
/// In training the gradient of x includes the dependence of the batch
/// statistics on x; otherwise the statistics are constants.
MIXGRAD_STUB(batch_norm_backward, 0, void(const BatchNormBackward& a));  // on a.grad_y's device

/// running = (1 - momentum) * running + momentum * batch statistic, the
/// variance times var_correction; computed in double, rounded to the
/// statistics dtype, stored in the running tensors' dtype. Does not bump
/// their versions (the op does).
MIXGRAD_STUB(batch_norm_update_running, 0, void(const BatchNormRunningUpdate& a));  // on running_mean's device

}  // namespace mixgrad::backend
