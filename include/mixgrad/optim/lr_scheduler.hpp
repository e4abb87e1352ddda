// mixgrad/optim/lr_scheduler.hpp — learning-rate schedules over an optimizer:
// StepLR, CosineAnnealingLR, LinearLR (warm-up), OneCycleLR, and SequentialLR
// to chain them (PyTorch's torch.optim.lr_scheduler, same formulas).
//
//   mg::optim::SGD opt(net.parameters(), {.lr = 0.1, .momentum = 0.9});
//   auto warm = std::make_shared<mg::optim::LinearLR>(opt, 0.01, 1.0, 100);
//   auto cos = std::make_shared<mg::optim::CosineAnnealingLR>(opt, 900);
//   mg::optim::SequentialLR sched(opt, {warm, cos}, {100});
//   for (...) {
//     { auto rec = gm.record(); auto loss = ...;
//       scaler.backward(gm, loss, {}, {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never}); }
//     scaler.step(opt);
//     sched.step(scaler);        // does not advance when this step overflowed
//     scaler.update();
//     opt.clear_grad();
//   }
//
// A scheduler is a closed form: the lr after `n` advances is lr_at(n), a pure
// function of n, the base lr (the optimizer's lr when the scheduler was
// built) and the options. Construction sets the optimizer's lr to lr_at(0);
// each advance sets it to lr_at(n + 1). The scheduler owns the lr: a
// set_lr() by hand is overwritten at the next advance. (PyTorch's default
// "chainable" forms compose multiplicatively with such edits; its closed
// forms, which `step(epoch)` uses, are the ones here, and the two agree when
// nothing else touches the lr.)
//
// Skipped steps. With a GradScaler, an overflowed step leaves the parameters
// as they were, yet PyTorch's `scheduler.step()` still advances the
// schedule, so a run with many overflows (the first steps of fp16 training,
// typically) spends its warm-up on steps that never happened. Here
// `step(scaler)` advances only when the scaler's step found no inf / NaN,
// and it does so without reading the flag on the host: from the first
// `step(scaler)` on, the scheduler keeps its count and every group's lr in
// tensors on the optimizer's device, advances them there from the scaler's
// flag, and the optimizer's update kernels read the lr from there
// (Optimizer::set_lr_tensor). Nothing waits for the GPU; last_epoch(),
// last_lr() and the optimizer's lr() then read the device (a
// synchronisation on a GPU, so read them at print lines, not every step).
// Plain `step()` always advances (on the device too, once it keeps the
// count there). Call `sched.step(scaler)` after the step's unscale
// (scaler.backward with unscale_grad, unscale(), or scaler.step(opt)),
// before or after scaler.update(). A disabled scaler never reports an
// overflow. A schedule without a device form (a StepLR with gamma > 1, whose
// lr can overflow; a scheduler of your own; a SequentialLR of more than 8
// or of nested ones) reads the flag on the host instead.
//
// Checkpoints. state_dict() holds "last_epoch" (0-d int64), "base_lr" and
// "options.<name>" (0-d float64); SequentialLR adds its children's dicts
// under "schedulers.<i>.". load_state_dict() checks everything first
// (ValueError for missing / unexpected keys or invalid values, nothing
// changed), then restores and sets the optimizer's lr to lr_at(last_epoch),
// so a resumed run continues the same sequence.
//
// Bad arguments throw ValueError naming the scheduler and the value, before
// anything (the optimizer's lr included) changes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "mixgrad/state_dict.hpp"

namespace mixgrad::amp {
class GradScaler;
}
namespace mixgrad::kernels {
struct ScheduleForm;
struct ScheduleProgram;
}

namespace mixgrad::optim {

class Optimizer;
class SequentialLR;

/// The base of every schedule: the step count, the base lr and the
/// checkpoint format. Not copyable (it refers to its optimizer).
class LRScheduler {
 public:
  virtual ~LRScheduler();
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  /// Advances one step and sets the optimizer's lr to lr_at(last_epoch()).
  /// OneCycleLR throws ValueError (nothing changed) past total_steps.
  void step();
  /// Advances as step() unless the scaler's step found inf / NaN
  /// gradients, on the device without a host read (see the overview).
  void step(amp::GradScaler& scaler);

  /// The lr this scheduler last set (PyTorch's get_last_lr()). Reads the
  /// device once the schedule runs there.
  double last_lr() const;
  /// How many times the schedule advanced. Reads the device once the
  /// schedule runs there.
  int64_t last_epoch() const;
  /// True once step(scaler) moved the count and the lrs to the device.
  bool on_device() const { return device_ != nullptr; }
  /// The lr the schedule is relative to (PyTorch's initial_lr), of group 0.
  double base_lr() const { return base_lrs_.front(); }
  /// The base lr of every parameter group of the optimizer: each group's lr
  /// follows the schedule from its own.
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  /// Group 0's lr after `epoch` advances (the closed form), without changing anything.
  double lr_at(int64_t epoch) const { return lr_for(epoch, base_lr()); }
  /// The lr after `epoch` advances for a group whose base lr is `base_lr`.
  virtual double lr_for(int64_t epoch, double base_lr) const = 0;

  /// "StepLR", "CosineAnnealingLR", ...
  const std::string& name() const { return name_; }
  Optimizer& optimizer() const { return opt_; }

  /// Snapshot: "last_epoch", "base_lr", "options.<name>" (see the overview).
  StateDict state_dict() const;
  /// Restores a state_dict() of a scheduler of the same kind and sets the
  /// optimizer's lr to lr_at(last_epoch). Checked first: ValueError, nothing
  /// changed.
  void load_state_dict(const StateDict& dict);
  /// The checks of load_state_dict alone.
  void check_state_dict(const StateDict& dict) const;

 protected:
  using Options = std::map<std::string, double>;

  /// Records the optimizer and its current lr as the base lr; changes nothing.
  LRScheduler(Optimizer& opt, std::string name);
  /// Sets the optimizer's lr to lr_at(0). Derived constructors call it last,
  /// once their options are checked.
  void start();
  /// Sets every group's lr to lr_for(epoch, its base lr), all checked
  /// first (ValueError, nothing changed); returns group 0's.
  double apply(int64_t epoch);
  /// "base_lr", then "base_lr.<g>" for every further group.
  std::vector<std::string> base_lr_keys() const;
  /// Throws ValueError naming the scheduler unless `ok`.
  void require(bool ok, const std::string& what) const;

  /// The options by name, as saved under "options.<name>".
  virtual Options options() const = 0;
  /// Throws ValueError unless `o` (all names of options()) is valid.
  virtual void check_options(const Options& o) const = 0;
  /// Sets already checked options.
  virtual void set_options(const Options& o) = 0;
  /// Throws (ValueError) if advancing to `epoch` is not allowed.
  virtual void check_advance(int64_t epoch) const { (void)epoch; }
  /// Throws (ValueError) if a dict's `epoch` does not fit its options `o`.
  virtual void check_loaded_epoch(int64_t epoch, const Options& o) const { (void)epoch, (void)o; }
  /// Called whenever last_epoch() changes (construction, step, load).
  virtual void on_epoch() {}
  /// The closed form (kernels/schedule.hpp) the device evaluates, written
  /// into `program`; false for a schedule that has none there (the host
  /// then reads the scaler's flag).
  virtual bool device_program(kernels::ScheduleProgram& program) const {
    (void)program;
    return false;
  }
  /// Further state (SequentialLR's children): appended / checked / loaded.
  virtual void save_extra(StateDict& dict) const { (void)dict; }
  virtual void check_extra(const StateDict& dict) const { (void)dict; }
  virtual void load_extra(const StateDict& dict) { (void)dict; }

 private:
  friend class SequentialLR;
  struct DeviceState;

  /// Throws (ValueError) if advancing once more is not allowed; on the
  /// device, reads the count only when the host's bound says it might not be.
  void check_next();
  /// Moves the count and the lrs to the optimizer's device (false: no device form).
  bool enter_device();
  /// The device advance, gated by `found_inf` (undefined: always).
  void advance_on_device(const Tensor& found_inf);
  /// Leaves the device: the host state becomes the truth again.
  void leave_device();

  Optimizer& opt_;
  std::string name_;
  std::vector<double> base_lrs_;  // per parameter group
  double last_lr_;
  int64_t last_epoch_ = 0;
  uint64_t serial_;  // construction order, for SequentialLR's base lr
  std::unique_ptr<DeviceState> device_;  // the count and lrs on the device; null: on the host
  const SequentialLR* parent_ = nullptr;  // the SequentialLR that drives this child, if any
};

/// lr = base_lr * gamma^floor(epoch / step_size) (PyTorch's StepLR).
class StepLR : public LRScheduler {
 public:
  /// step_size >= 1; gamma finite and >= 0.
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);
  double lr_for(int64_t epoch, double base_lr) const override;

 protected:
  Options options() const override;
  void check_options(const Options& o) const override;
  void set_options(const Options& o) override;
  bool device_program(kernels::ScheduleProgram& program) const override;

 private:
  kernels::ScheduleForm form() const;
  int64_t step_size_;
  double gamma_;
};

/// lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2
/// (PyTorch's CosineAnnealingLR closed form: base_lr at 0, eta_min at
/// T_max, and, like PyTorch, rising again after T_max).
class CosineAnnealingLR : public LRScheduler {
 public:
  /// T_max >= 1; eta_min finite and >= 0.
  CosineAnnealingLR(Optimizer& opt, int64_t T_max, double eta_min = 0.0);
  double lr_for(int64_t epoch, double base_lr) const override;

 protected:
  Options options() const override;
  void check_options(const Options& o) const override;
  void set_options(const Options& o) override;
  bool device_program(kernels::ScheduleProgram& program) const override;

 private:
  kernels::ScheduleForm form() const;
  int64_t t_max_;
  double eta_min_;
};

/// lr = base_lr * (start_factor + (end_factor - start_factor) *
/// min(epoch, total_iters) / total_iters): a linear warm-up (PyTorch's
/// LinearLR, same defaults).
class LinearLR : public LRScheduler {
 public:
  /// start_factor in (0, 1], end_factor in [0, 1], total_iters >= 1.
  LinearLR(Optimizer& opt, double start_factor = 1.0 / 3.0, double end_factor = 1.0, int64_t total_iters = 5);
  double lr_for(int64_t epoch, double base_lr) const override;

 protected:
  Options options() const override;
  void check_options(const Options& o) const override;
  void set_options(const Options& o) override;
  bool device_program(kernels::ScheduleProgram& program) const override;

 private:
  kernels::ScheduleForm form() const;
  double start_factor_;
  double end_factor_;
  int64_t total_iters_;
};

/// How OneCycleLR moves between its phase end points.
enum class AnnealStrategy { cos, linear };

/// Settings of a OneCycleLR (PyTorch's defaults).
struct OneCycleOptions {
  double pct_start = 0.3;  ///< in [0, 1]: the fraction of the steps spent rising
  AnnealStrategy anneal_strategy = AnnealStrategy::cos;
  double div_factor = 25.0;        ///< initial lr = max_lr / div_factor; finite, > 0
  double final_div_factor = 1e4;   ///< min lr = initial lr / final_div_factor; finite, > 0
  bool three_phase = false;        ///< rise, fall back to the initial lr, then anneal to the min
};

/// The 1cycle policy (PyTorch's OneCycleLR, lr only; momentum is not
/// cycled): from max_lr / div_factor up to max_lr at step
/// pct_start * total_steps - 1, then down to initial / final_div_factor at
/// step total_steps - 1. The base lr is not used. Advancing past
/// total_steps throws ValueError, as PyTorch does.
class OneCycleLR : public LRScheduler {
 public:
  /// max_lr finite and > 0; total_steps >= 1; see OneCycleOptions.
  OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, const OneCycleOptions& options = {});
  double lr_for(int64_t epoch, double base_lr) const override;

 protected:
  Options options() const override;
  void check_options(const Options& o) const override;
  void set_options(const Options& o) override;
  bool device_program(kernels::ScheduleProgram& program) const override;
  void check_advance(int64_t epoch) const override;
  void check_loaded_epoch(int64_t epoch, const Options& o) const override;

 private:
  kernels::ScheduleForm form() const;
  double max_lr_;
  int64_t total_steps_;
  OneCycleOptions o_;
};

/// Runs `schedulers[0]` until milestones[0], then schedulers[1] from its own
/// step 0, and so on (PyTorch's SequentialLR): at global step e the lr is
/// schedulers[i].lr_at(e - milestones[i - 1]), i the number of milestones
/// <= e. Every child must wrap the same optimizer; all of them take as base
/// lr the optimizer's lr from before the first of them was built (PyTorch's
/// shared initial_lr), whatever the children set meanwhile. The children
/// are driven through lr_at() (the child in charge has its last_epoch() and
/// last_lr() kept up to date): do not step them yourself.
class SequentialLR : public LRScheduler {
 public:
  /// One milestone fewer than schedulers, strictly increasing and >= 1; no
  /// null child; ValueError otherwise.
  SequentialLR(Optimizer& opt, std::vector<std::shared_ptr<LRScheduler>> schedulers, std::vector<int64_t> milestones);
  double lr_for(int64_t epoch, double base_lr) const override;
  const std::vector<std::shared_ptr<LRScheduler>>& schedulers() const { return children_; }

 protected:
  Options options() const override;
  void check_options(const Options& o) const override;
  void set_options(const Options& o) override;
  void check_advance(int64_t epoch) const override;
  void save_extra(StateDict& dict) const override;
  void check_extra(const StateDict& dict) const override;
  void load_extra(const StateDict& dict) override;
  void on_epoch() override;
  bool device_program(kernels::ScheduleProgram& program) const override;

 private:
  friend class LRScheduler;
  // The index of the child in charge at global step `epoch`, and its local step.
  std::pair<size_t, int64_t> locate(int64_t epoch) const;

  std::vector<std::shared_ptr<LRScheduler>> children_;
  std::vector<int64_t> milestones_;
};

}  // namespace mixgrad::optim
