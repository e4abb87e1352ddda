// Backend primitives of the optimizers: one fused, in-place update of a
// parameter, its state buffers and its step count from its gradient. The
// element math is in kernels/optim.hpp.
//
// Each update takes the parameter's step count (a 0-d int64 tensor on its
// device: the updates so far) and a found-inf flag (a one-element float32
// tensor there, or undefined): when the flag is nonzero the kernel changes
// nothing, else it updates and advances the count. Both are read where they
// live, so a GradScaler-skipped step costs no host round trip.
//
// UpdateOperands carries what a fused step reads where it lives rather than
// from the host: the inverse loss scale the gradient is multiplied by (a
// GradScaler's unscale done inside the update instead of a separate pass),
// the float32 master copy of a 16-bit parameter, which the rule updates and
// whose rounding it writes to the parameter in the same pass, and the
// learning rate when a scheduler keeps it on the device.
#pragma once

#include <cstdint>

#include "backend/dispatch.hpp"
#include "kernels/schedule.hpp"

namespace mixgrad::backend {

struct SgdStep {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};

struct AdamStep {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  bool decoupled = false;
};

struct UpdateOperands {
  /// A one-element float64 tensor on the parameter's device holding the
  /// factor the gradient is multiplied by (rounded once to the compute type,
  /// as the separate unscale pass applies it), or undefined for 1.
  Tensor inv_scale;
  /// The float32 master copy (parameter's shape, any strides) of a float16 /
  /// bfloat16 parameter, or undefined. Ignored for other parameter dtypes.
  Tensor master;
  /// A one-element float64 tensor on the parameter's device holding the
  /// learning rate, which then replaces the step's `lr`; or undefined.
  Tensor lr;
};

/// param <- SGD(param, grad), unless found_inf is set; momentum_buffer is
/// undefined when momentum == 0, and initialised from the gradient when
/// step is 0. grad may have any floating dtype and strides; buffers are in
/// float32 (float64 for float64 parameters) with the parameter's shape.
MIXGRAD_STUB(sgd_update, 0,
             void(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const Tensor& step,
                  const Tensor& found_inf, const SgdStep& s, const UpdateOperands& amp));  // on param's device

/// param <- Adam(param, grad), unless found_inf is set, with the bias
/// corrections of update step + 1; max_exp_avg_sq is undefined unless AMSGrad.
MIXGRAD_STUB(adam_update, 0,
             void(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const Tensor& max_exp_avg_sq, const Tensor& step, const Tensor& found_inf, const AdamStep& s,
                  const UpdateOperands& amp));  // on param's device

/// A learning-rate scheduler's step where its count lives: unless
/// found_inf (a one-element float32 tensor, or undefined) is set, epoch (a
/// 0-d int64 tensor) advances by one when `advance` is true; then every
/// lrs[g] = program.lr(epoch, bases[g]). lrs and bases: 1-D float64 tensors
/// of one entry per parameter group, on epoch's device.
MIXGRAD_STUB(advance_schedule, 0,
             void(const Tensor& epoch, const Tensor& lrs, const Tensor& bases, const Tensor& found_inf,
                  const kernels::ScheduleProgram& program, bool advance));  // on epoch's device

}  // namespace mixgrad::backend
