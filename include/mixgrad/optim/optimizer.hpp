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
// Parameter groups (PyTorch's param_groups): an optimizer built from
// ParamGroups gives each group hyper-parameters of its own, the optimizer's
// options where the group does not say otherwise. The usual use is weight
// decay on weight matrices only (weight_decay_groups does nanoGPT's split):
//
//   mg::optim::AdamW opt(mg::optim::weight_decay_groups(net.parameters(), 0.1), {.lr = 6e-4});
//   mg::optim::SGD sgd({{backbone, {{"lr", 0.01}}}, {head, {}}}, {.lr = 0.1, .momentum = 0.9});
//
// set_lr(lr) sets every group's lr; set_lr(g, lr) and
// set_hyperparameter(g, name, value) one group's. Schedulers scale each
// group from its own base lr.
//
// State dict keys: "options.<name>" (0-d float64) for the hyper-parameters
// of group 0 (of the only group, usually), "state.<i>.step" (0-d int64) and
// "state.<i>.<buffer>" for parameter i (in the order given at construction,
// group after group) once it has been updated, and "state.<i>.master"
// (float32, the parameter's shape) for each parameter with a master copy,
// updated or not. With more than one group, "param_groups.sizes" (int64,
// one entry per group) and "param_groups.<g>.<name>" for the hyper-parameters
// of group g >= 1.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "mixgrad/amp_step.hpp"
#include "mixgrad/state_dict.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::optim {

/// Parameters that share hyper-parameters (see the overview).
struct ParamGroup {
  std::vector<Tensor> params;
  /// The hyper-parameters that differ from the optimizer's options, by their
  /// state-dict names ("lr", "weight_decay", "momentum", "beta1", ...). An
  /// unknown name or an invalid value is a ValueError.
  std::map<std::string, double> options;
};

/// Two groups: the parameters of two or more dimensions (weight matrices,
/// convolution kernels, embeddings) with `weight_decay`, and the others
/// (biases, norm weights) with none, in this order (either may be empty).
std::vector<ParamGroup> weight_decay_groups(const std::vector<Tensor>& params, double weight_decay);

class Optimizer : public AmpStepTarget {
 public:
  ~Optimizer() override;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// One update of every parameter with a defined gradient; parameters whose
  /// gradient carries a set found-inf flag are left as they were (see
  /// above). Gradients are checked first (same shape and device as the
  /// parameter, floating dtype, not still scaled by a GradScaler): a
  /// ShapeError / DTypeError / DeviceError / StateError leaves every
  /// parameter and all state untouched. Returns *this, so
  /// `opt.step().clear_grad()` chains.
  Optimizer& step() { return step(AmpStep{}); }
  /// The step under a scaler's AmpStep (mixgrad/amp_step.hpp): gradients
  /// still scaled by `amp.scaler` are multiplied by amp.inv_scale in the
  /// update and skipped when amp.found_inf is set; the others follow their
  /// own marks, as in step(). A gradient still scaled by amp.scaler with no
  /// amp.inv_scale is a StateError. GradScaler::step calls it.
  Optimizer& step(const AmpStep& amp) override;
  /// The mixed-precision step, for a loop whose gradients `scaler`'s
  /// backward scaled (PyTorch's `step` of an optimizer with
  /// `_step_supports_amp_scaling`): the same as `scaler.step(*this, true)`
  /// (see GradScaler::step). Gradients the scaler scaled and has not
  /// unscaled are unscaled inside the update kernel, after one read-only
  /// pass that sets the step's found-inf flag; they stay scaled in memory.
  /// Returns *this.
  template <class Scaler>
    requires requires(Scaler& scaler, Optimizer& opt) { scaler.step(opt, true); }
  Optimizer& step(Scaler& scaler) {
    scaler.step(*this, true);
    return *this;
  }
  /// The checks of step(amp) alone: throws what it would throw, changes nothing.
  void check_step(const AmpStep& amp) const override;
  /// Makes every parameter's gradient undefined (MegEngine's clear_grad);
  /// the next backward starts from nothing. Returns *this.
  Optimizer& clear_grad();
  /// Same as clear_grad() (PyTorch's zero_grad with set_to_none).
  Optimizer& zero_grad() { return clear_grad(); }

  /// The learning rate of group 0.
  double lr() const { return lr(0); }
  /// The learning rate of group `group` (ValueError out of range).
  double lr(size_t group) const { return hyperparameter(group, "lr"); }
  /// Sets every group's learning rate; throws ValueError unless lr >= 0 and finite.
  void set_lr(double lr);
  /// Sets one group's learning rate.
  void set_lr(size_t group, double lr) { set_hyperparameter(group, "lr", lr); }
  /// Makes group `group` read its learning rate from `lr`, a one-element
  /// float64 tensor (normally on the parameters' device; it is copied to
  /// theirs each step otherwise), at every step, instead of the host value.
  /// A scheduler stepped with a GradScaler writes it there, so a skipped step
  /// needs no host read (see lr_scheduler.hpp). lr() then reads the tensor (a
  /// synchronisation on a GPU); set_lr(), set_hyperparameter("lr") and
  /// load_state_dict() go back to a host value. The writer keeps the value
  /// finite and >= 0. DTypeError for another dtype or size, ValueError for a
  /// group out of range; nothing changed.
  void set_lr_tensor(size_t group, Tensor lr);
  /// The tensor group `group` reads its lr from, or an undefined tensor.
  Tensor lr_tensor(size_t group) const;

  /// How many parameter groups there are (1 unless built from ParamGroups).
  size_t num_param_groups() const { return groups_.size(); }
  /// The parameters of group `group`, in order (ValueError out of range).
  std::vector<Tensor> param_group(size_t group) const;
  /// A hyper-parameter of a group by its state-dict name (ValueError for an
  /// unknown name or group).
  double hyperparameter(size_t group, const std::string& name) const;
  /// Sets one hyper-parameter of one group: checked first (ValueError, nothing changed).
  void set_hyperparameter(size_t group, const std::string& name, double value);

  /// The parameters, in construction order (group after group).
  const std::vector<Tensor>& parameters() const override { return params_; }
  /// How many updates parameter i has received (skipped steps do not count).
  /// Reads the device-side count: a synchronisation.
  int64_t step_count(size_t i) const;

  /// Snapshot of the hyper-parameters and per-parameter state (see above).
  /// Reads the step counts (a synchronisation) to leave out parameters that
  /// were never updated.
  StateDict state_dict() const;
  /// Restores hyper-parameters and state saved by state_dict() of an
  /// optimizer of the same kind over parameters of the same shapes, in
  /// groups of the same sizes. Checked before anything changes: missing /
  /// unexpected keys, other group sizes or bad option values (ValueError), a
  /// wrong state shape (ShapeError) or dtype (DTypeError) leave the
  /// optimizer as it was.
  void load_state_dict(const StateDict& dict);
  /// The checks of load_state_dict alone: throws what it would throw and
  /// changes nothing (to validate several objects before loading any).
  void check_state_dict(const StateDict& dict) const;

  /// "SGD", "Adam", "AdamW".
  const std::string& name() const { return name_; }

  /// True when the optimizer keeps float32 master copies of its float16 /
  /// bfloat16 parameters (the `master_weights` option).
  bool master_weights() const { return master_weights_; }
  /// Switches master weights on or off after construction, as apex's
  /// amp.initialize does for O2 on an optimizer built over float32
  /// parameters that it then casts: on takes a float32 copy of every float16
  /// / bfloat16 parameter now (what the `master_weights` option does at
  /// construction), off drops the copies. Only before the first step():
  /// afterwards a change throws StateError and changes nothing (the same
  /// setting is accepted). Returns *this.
  Optimizer& set_master_weights(bool on);
  /// The check of set_master_weights(on) alone: throws what it would throw.
  void check_set_master_weights(bool on) const;
  /// The float32 master copy of parameter i (the tensor the optimizer
  /// updates; apex's `amp.master_params`), or an undefined tensor when it has
  /// none (master_weights() false, or a float32 / float64 parameter). Throws
  /// ShapeError for i out of range.
  Tensor master_weight(size_t i) const;
  /// True when `scaler.step(opt)` unscales inside this optimizer's update
  /// kernel (the `step_supports_amp_scaling` option; see GradScaler::step).
  bool step_supports_amp_scaling() const override { return amp_scaling_; }

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
    /// This step's learning rate on the parameter's device when its group
    /// reads it from a tensor (set_lr_tensor), else undefined: the backend
    /// update takes it as UpdateOperands::lr.
    Tensor lr;
  };

  /// Checks the parameters: defined (StateError), floating (DTypeError), at
  /// least one in all and no duplicates (ValueError); each group's
  /// hyper-parameters are `defaults` with the group's options over them
  /// (ValueError for a name `defaults` lacks). The derived constructor then
  /// calls check_groups(). With `master_weights`, takes a float32 master copy
  /// of every float16 / bfloat16 parameter. `amp_scaling`:
  /// step_supports_amp_scaling().
  Optimizer(std::vector<ParamGroup> groups, std::string name, const Hyperparameters& defaults,
            bool master_weights = false, bool amp_scaling = false);
  /// Every group's hyper-parameters through check_hyperparameters.
  void check_groups() const;

  /// Throws ValueError if `h` (all names of the defaults) is not valid.
  virtual void check_hyperparameters(const Hyperparameters& h) const = 0;
  /// The per-parameter buffers under the hyper-parameters `h`.
  virtual std::vector<std::string> buffer_names(const Hyperparameters& h) const = 0;
  /// Updates `param` from `grad * amp.inv_scale` under the hyper-parameters
  /// `h` of its group, unless `amp.found_inf` is set; `state.step` counts the
  /// updates before this one and is advanced by the kernel; `state.buffers`
  /// exist; `state.master`, when defined, is the value to update, and
  /// `param` receives its rounding.
  virtual void update(const Tensor& param, const Tensor& grad, ParamState& state, const AmpStep& amp,
                      const Hyperparameters& h) = 0;

  /// The hyper-parameters of group `group` (unchecked index).
  const Hyperparameters& group_hyperparameters(size_t group) const { return groups_[group].hyperparameters; }
  /// Throws ValueError naming the optimizer and the option unless `ok`.
  void require(bool ok, const std::string& what) const;

 private:
  struct Group {
    size_t begin = 0, end = 0;  // parameter indices [begin, end)
    Hyperparameters hyperparameters;
    Tensor lr_source;  // set_lr_tensor's tensor; hyperparameters["lr"] is stale while it is set
  };
  struct CheckedLoad;
  CheckedLoad check_load(const StateDict& dict) const;
  /// Whether parameter i is updated through a master copy now.
  bool uses_master(size_t i) const;
  /// The index of parameter i's group.
  size_t group_index(size_t i) const;
  void check_group_index(size_t group, const char* op) const;
  /// The AmpStep parameter i's update runs under: `amp`'s for a gradient
  /// still scaled by amp.scaler, else the gradient's own flag.
  static AmpStep amp_for(const Tensor& grad, const AmpStep& amp);
  /// Creates the step count and the buffers of parameter i, and refreshes
  /// its master copy, before its update.
  void prepare_state(size_t i, const std::vector<std::string>& names);

  std::vector<Tensor> params_;
  std::vector<ParamState> state_;
  std::vector<Group> groups_;
  std::string name_;
  bool master_weights_ = false;
  bool amp_scaling_ = false;
  bool stepped_ = false;  // step() has run: master weights can no longer be switched
};

}  // namespace mixgrad::optim
