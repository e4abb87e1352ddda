// mixgrad/optim/optimizer.hpp — the base of SGD, Adam and AdamW.
//
// An optimizer holds handles to the parameters it updates and per-parameter
// state (momentum buffers, moments, a step count). step() updates every
// parameter whose gradient is defined, in place and unrecorded; a parameter
// whose gradient is undefined (never computed, or cleared) is skipped and
// its state is left as it was.
//
// Mixed precision: a gradient that a GradScaler unscaled carries that step's
// found-inf flag (a one-element tensor on the device), and the fused update
// kernel reads it: when it is set, the parameter, its buffers and its step
// count stay as they were, with no host round trip. The step count is
// therefore a 0-d int64 tensor on the parameter's device, advanced by the
// kernel; step_count() reads it (a synchronisation). A gradient a
// GradScaler scaled and has not unscaled is refused (see step()).
//
//   mg::optim::SGD opt(net.parameters(), {.lr = 0.05, .momentum = 0.9});
//   opt.step().clear_grad();                  // MegEngine style
//   opt.set_lr(opt.lr() * 0.1);               // a schedule
//   auto sd = opt.state_dict();               // for a checkpoint
//   opt.load_state_dict(sd);
//
// Updates are computed in float32 for float32, float16 and bfloat16
// parameters (a low-precision gradient is widened on the fly, state buffers
// are float32) and in float64 for float64 parameters.
//
// Master weights (apex's O2, `{.master_weights = true}` in the options of
// SGD, Adam and AdamW): every float16 / bfloat16 parameter gets a float32
// master copy, taken from the parameter when the optimizer is built. The
// update runs on the master copy and writes its rounding to the 16-bit
// parameter in the same fused pass, so small updates accumulate in float32
// instead of being rounded away, and the step needs no weight cast. A
// parameter changed outside the optimizer (Module::load_state_dict, an
// initialisation: anything that bumps its version) to a value that is not
// its master copy's rounding has its master copy taken from it again at the
// next step; a write of the same values (loading the model of the
// checkpoint the master copies came from, in either order) keeps them.
// float32 / float64 parameters need no copy and get none. On a CUDA device
// the master copy lives beside its parameter and the update reads it there
// (one kernel per parameter, no host read).
//
//   net.to(mg::DType::bfloat16);
//   mg::optim::SGD opt(net.parameters(), {.lr = 0.05, .momentum = 0.9, .master_weights = true});
//
// AMP scaling in the step (PyTorch's `_step_supports_amp_scaling`):
// `opt.step(scaler)` — and `scaler.step(opt)` for an optimizer built with
// `{.step_supports_amp_scaling = true}` — unscales inside the update kernel. The scaler first reads the still-scaled gradients once
// to set the step's found-inf flag (nothing is written); the update then
// multiplies each gradient by 1 / scale as it reads it, or changes nothing
// when the flag is set. The gradients stay scaled in memory afterwards.
//
// State dict keys: "options.<name>" (0-d float64) for the hyper-parameters,
// "state.<i>.step" (0-d int64) and "state.<i>.<buffer>" for parameter i (in
// the order given at construction) once it has been updated, and
// "state.<i>.master" (float32, the parameter's shape) for each parameter
// with a master copy, updated or not.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "mixgrad/state_dict.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::amp {
class GradScaler;
}

namespace mixgrad::optim {

class Optimizer {
 public:
  virtual ~Optimizer();
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// One update of every parameter with a defined gradient; parameters whose
  /// gradient carries a set found-inf flag are left as they were (see
  /// above). Gradients are checked first (same shape and device as the
  /// parameter, floating dtype, not still scaled by a GradScaler): a
  /// ShapeError / DTypeError / DeviceError / StateError leaves every
  /// parameter and all state untouched. Returns *this, so
  /// `opt.step().clear_grad()` chains.
  Optimizer& step();
  /// The mixed-precision step, for a loop whose gradients `scaler`'s
  /// backward scaled (PyTorch's `step` of an optimizer with
  /// `_step_supports_amp_scaling`): the same as `scaler.step(*this)` (see
  /// GradScaler::step). Gradients the scaler scaled and has not unscaled are
  /// unscaled inside the update kernel, after one read-only pass that sets
  /// the step's found-inf flag; they stay scaled in memory. Returns *this.
  Optimizer& step(amp::GradScaler& scaler);
  /// Makes every parameter's gradient undefined (MegEngine's clear_grad);
  /// the next backward starts from nothing. Returns *this.
  Optimizer& clear_grad();
  /// Same as clear_grad() (PyTorch's zero_grad with set_to_none).
  Optimizer& zero_grad() { return clear_grad(); }

  /// The learning rate.
  double lr() const;
  /// Sets the learning rate (for schedules); throws ValueError unless lr >= 0 and finite.
  void set_lr(double lr);

  /// The parameters, in construction order.
  const std::vector<Tensor>& parameters() const { return params_; }
  /// How many updates parameter i has received (skipped steps do not count).
  /// Reads the device-side count: a synchronisation.
  int64_t step_count(size_t i) const;

  /// Snapshot of the hyper-parameters and per-parameter state (see above).
  /// Reads the step counts (a synchronisation) to leave out parameters that
  /// were never updated.
  StateDict state_dict() const;
  /// Restores hyper-parameters and state saved by state_dict() of an
  /// optimizer of the same kind over parameters of the same shapes. Checked
  /// before anything changes: missing / unexpected keys or bad option values
  /// (ValueError), a wrong state shape (ShapeError) or dtype
  /// (DTypeError) leave the optimizer as it was.
  void load_state_dict(const StateDict& dict);
  /// The checks of load_state_dict alone: throws what it would throw and
  /// changes nothing (to validate several objects before loading any).
  void check_state_dict(const StateDict& dict) const;

  /// "SGD", "Adam", "AdamW".
  const std::string& name() const { return name_; }

  /// True when the optimizer keeps float32 master copies of its float16 /
  /// bfloat16 parameters (the `master_weights` option).
  bool master_weights() const { return master_weights_; }
  /// The float32 master copy of parameter i (the tensor the optimizer
  /// updates; apex's `amp.master_params`), or an undefined tensor when it has
  /// none (master_weights() false, or a float32 / float64 parameter). Throws
  /// ShapeError for i out of range.
  Tensor master_weight(size_t i) const;
  /// True when `scaler.step(opt)` unscales inside this optimizer's update
  /// kernel (the `step_supports_amp_scaling` option; see GradScaler::step).
  bool step_supports_amp_scaling() const { return amp_scaling_; }

 protected:
  using Hyperparameters = std::map<std::string, double>;

  /// Per-parameter state: the number of updates (a 0-d int64 tensor on the
  /// parameter's device, advanced by the update kernel) and the buffers named
  /// by buffer_names(), created (zero-filled) before the first update.
  struct ParamState {
    Tensor step;
    std::vector<Tensor> buffers;
    /// The float32 master copy (master weights, 16-bit parameter), or undefined.
    Tensor master;
    /// The parameter's version when the master copy was last written to it.
    uint64_t master_version = 0;
  };

  /// The per-step mixed-precision inputs of an update.
  struct AmpStep {
    /// A one-element float32 flag on the parameter's device, or undefined:
    /// when it is set the update changes nothing.
    Tensor found_inf;
    /// A 0-d float64 tensor on the device: the gradient is multiplied by it
    /// inside the update (a fused unscale); undefined for 1.
    Tensor inv_scale;
  };

  /// Checks the parameters: defined (StateError), floating (DTypeError), at
  /// least one and no duplicates (ValueError). With `master_weights`, takes
  /// a float32 master copy of every float16 / bfloat16 parameter.
  /// `amp_scaling`: step_supports_amp_scaling().
  Optimizer(std::vector<Tensor> params, std::string name, bool master_weights = false, bool amp_scaling = false);

  /// The hyper-parameters by name; "lr" must be one of them.
  virtual Hyperparameters hyperparameters() const = 0;
  /// Throws ValueError if `h` (all names of hyperparameters()) is not valid.
  virtual void check_hyperparameters(const Hyperparameters& h) const = 0;
  /// Sets already checked hyper-parameters.
  virtual void set_hyperparameters(const Hyperparameters& h) = 0;
  /// The per-parameter buffers under the hyper-parameters `h`.
  virtual std::vector<std::string> buffer_names(const Hyperparameters& h) const = 0;
  /// Updates `param` from `grad * amp.inv_scale` unless `amp.found_inf` is
  /// set; `state.step` counts the updates before this one and is advanced by
  /// the kernel; `state.buffers` exist; `state.master`, when defined, is the
  /// value to update, and `param` receives its rounding.
  virtual void update(const Tensor& param, const Tensor& grad, ParamState& state, const AmpStep& amp) = 0;

  /// Throws ValueError naming the optimizer and the option unless `ok`.
  void require(bool ok, const std::string& what) const;

 private:
  friend class amp::GradScaler;
  struct CheckedLoad;
  CheckedLoad check_load(const StateDict& dict) const;
  /// Whether parameter i is updated through a master copy now.
  bool uses_master(size_t i) const;
  /// The gradients step() would update, checked (see step()). Gradients
  /// scaled by `scaler` (not null) and not unscaled are accepted: step_with
  /// unscales them in the update.
  void check_grads(const amp::GradScaler* scaler) const;
  /// step() once check_grads passed: gradients scaled by `scaler` are
  /// multiplied by `inv_scale` in the update and skipped on `found_inf`.
  void step_with(const amp::GradScaler* scaler, const Tensor& inv_scale, const Tensor& found_inf);

  std::vector<Tensor> params_;
  std::vector<ParamState> state_;
  std::string name_;
  bool master_weights_ = false;
  bool amp_scaling_ = false;
};

}  // namespace mixgrad::optim
