// The learning-rate schedules' closed forms (optim/lr_scheduler.hpp), one
// definition for the host and the device: LRScheduler::lr_for evaluates them
// on the host, and the scheduler's device advance (backend/optim.hpp,
// advance_schedule) evaluates them where the step count lives, so a step the
// GradScaler skipped is not counted without a host read.
//
// A ScheduleProgram is a SequentialLR of up to kMaxForms closed forms (one
// form and no milestone for a plain scheduler): at global step e the form in
// charge is the one after the milestones <= e, from its own step
// e - milestones[i - 1].
#pragma once

#include <cmath>
#include <cstdint>

#include "mixgrad/half.hpp"

namespace mixgrad::kernels {

/// One closed form and its options.
struct ScheduleForm {
  enum Kind : int32_t { step, cosine, linear, one_cycle };
  Kind kind = step;
  /// step: gamma. cosine: eta_min. linear: start_factor. one_cycle: max_lr.
  double a = 0;
  /// linear: end_factor. one_cycle: div_factor.
  double b = 0;
  /// one_cycle: final_div_factor.
  double c = 0;
  /// one_cycle: pct_start.
  double d = 0;
  /// step: step_size. cosine: T_max. linear: total_iters. one_cycle: total_steps.
  int64_t n = 1;
  /// one_cycle: linear annealing (else cosine).
  bool linear_anneal = false;
  /// one_cycle: three phases.
  bool three_phase = false;
};

inline constexpr double kSchedulePi = 3.14159265358979323846;  // std::numbers::pi, usable in device code

/// PyTorch's OneCycleLR at `epoch` (the base lr is not used).
MIXGRAD_HOST_DEVICE inline double one_cycle_lr(const ScheduleForm& f, int64_t epoch) {
  const double initial = f.a / f.b;
  const double min_lr = initial / f.c;
  const double rise_end = f.d * static_cast<double>(f.n) - 1.0;
  const double last = static_cast<double>(f.n) - 1.0;
  const int phases = f.three_phase ? 3 : 2;
  const double ends[3] = {rise_end, f.three_phase ? 2.0 * rise_end : last, last};
  const double from[3] = {initial, f.a, initial};
  const double to[3] = {f.a, f.three_phase ? initial : min_lr, min_lr};
  const double step = static_cast<double>(epoch);
  double start_step = 0.0;
  for (int i = 0; i < phases; ++i) {
    if (step <= ends[i] || i + 1 == phases) {
      // A phase of no length (pct_start * total_steps == 1) is already at its
      // end; PyTorch divides by zero there.
      const double span = ends[i] - start_step;
      const double pct = span == 0.0 ? 1.0 : (step - start_step) / span;
      if (!f.linear_anneal) return to[i] + (from[i] - to[i]) / 2.0 * (std::cos(kSchedulePi * pct) + 1.0);
      return (to[i] - from[i]) * pct + from[i];
    }
    start_step = ends[i];
  }
  return min_lr;  // not reached
}

/// The lr of form `f` after `epoch` advances, for a group whose base lr is `base`.
MIXGRAD_HOST_DEVICE inline double schedule_lr(const ScheduleForm& f, int64_t epoch, double base) {
  switch (f.kind) {
    case ScheduleForm::step:
      return base * std::pow(f.a, static_cast<double>(epoch / f.n));
    case ScheduleForm::cosine: {
      const double t = static_cast<double>(epoch) / static_cast<double>(f.n);
      return f.a + (base - f.a) * (1.0 + std::cos(kSchedulePi * t)) / 2.0;
    }
    case ScheduleForm::linear: {
      const int64_t done_steps = epoch < f.n ? epoch : f.n;
      const double done = static_cast<double>(done_steps) / static_cast<double>(f.n);
      return base * (f.a + (f.b - f.a) * done);
    }
    case ScheduleForm::one_cycle:
      return one_cycle_lr(f, epoch);
  }
  return base;  // not reached
}

/// A SequentialLR of closed forms (see the overview).
struct ScheduleProgram {
  static constexpr int kMaxForms = 8;
  ScheduleForm forms[kMaxForms];
  int64_t milestones[kMaxForms - 1] = {};
  int32_t count = 0;  // forms used; count - 1 milestones

  /// The lr after `epoch` global advances for base lr `base`.
  MIXGRAD_HOST_DEVICE double lr(int64_t epoch, double base) const {
    int i = 0;
    while (i + 1 < count && milestones[i] <= epoch) ++i;
    return schedule_lr(forms[i], i == 0 ? epoch : epoch - milestones[i - 1], base);
  }
};

}  // namespace mixgrad::kernels
