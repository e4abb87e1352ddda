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
// State dict keys: "options.<name>" (0-d float64) for the hyper-parameters,
// "state.<i>.step" (0-d int64) and "state.<i>.<buffer>" for parameter i (in
// the order given at construction) once it has been updated.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "mixgrad/state_dict.hpp"
#include "mixgrad/tensor.hpp"

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

 protected:
  using Hyperparameters = std::map<std::string, double>;

  /// Per-parameter state: the number of updates (a 0-d int64 tensor on the
  /// parameter's device, advanced by the update kernel) and the buffers named
  /// by buffer_names(), created (zero-filled) before the first update.
  struct ParamState {
    Tensor step;
    std::vector<Tensor> buffers;
  };

  /// Checks the parameters: defined (StateError), floating (DTypeError), at
  /// least one and no duplicates (ValueError).
  Optimizer(std::vector<Tensor> params, std::string name);

  /// The hyper-parameters by name; "lr" must be one of them.
  virtual Hyperparameters hyperparameters() const = 0;
  /// Throws ValueError if `h` (all names of hyperparameters()) is not valid.
  virtual void check_hyperparameters(const Hyperparameters& h) const = 0;
  /// Sets already checked hyper-parameters.
  virtual void set_hyperparameters(const Hyperparameters& h) = 0;
  /// The per-parameter buffers under the hyper-parameters `h`.
  virtual std::vector<std::string> buffer_names(const Hyperparameters& h) const = 0;
  /// Updates `param` from `grad` unless `found_inf` (a one-element float32
  /// flag on the device, or undefined) is set; `state.step` counts the
  /// updates before this one and is advanced by the kernel; `state.buffers`
  /// exist.
  virtual void update(const Tensor& param, const Tensor& grad, ParamState& state, const Tensor& found_inf) = 0;

  /// Throws ValueError naming the optimizer and the option unless `ok`.
  void require(bool ok, const std::string& what) const;

 private:
  struct CheckedLoad;
  CheckedLoad check_load(const StateDict& dict) const;

  std::vector<Tensor> params_;
  std::vector<ParamState> state_;
  std::string name_;
};

}  // namespace mixgrad::optim
