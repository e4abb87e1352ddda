#include "mixgrad/optim/lr_scheduler.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <set>
#include <sstream>

#include "backend/optim.hpp"
#include "kernels/schedule.hpp"
#include "mixgrad/amp/grad_scaler.hpp"
#include "mixgrad/error.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/optim/optimizer.hpp"

namespace mixgrad::optim {

namespace {

std::atomic<uint64_t> next_serial{0};

std::string num(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

bool is_int(double v) { return std::isfinite(v) && v == std::trunc(v) && std::abs(v) < 0x1p62; }

// The entries of `dict` under `prefix`, with the prefix removed.
StateDict sub_dict(const StateDict& dict, const std::string& prefix) {
  StateDict out;
  for (const auto& [k, t] : dict)
    if (k.compare(0, prefix.size(), prefix) == 0) out.insert(k.substr(prefix.size()), t);
  return out;
}

// A program of one form.
bool single(kernels::ScheduleProgram& p, const kernels::ScheduleForm& f) {
  p.count = 1;
  p.forms[0] = f;
  return true;
}

}  // namespace

// ---------------------------------------------------------------- LRScheduler

// The schedule on the optimizer's device: the count, the bases and the lrs
// the optimizer's groups read (views of `lrs`).
struct LRScheduler::DeviceState {
  kernels::ScheduleProgram program;
  Tensor epoch;  // 0-d int64
  Tensor bases;  // [groups] float64
  Tensor lrs;    // [groups] float64
  int64_t bound = 0;  // the count is at most this (advances asked for since it was last read)
};

LRScheduler::LRScheduler(Optimizer& opt, std::string name)
    : opt_(opt), name_(std::move(name)), last_lr_(opt.lr()), serial_(next_serial++) {
  for (size_t g = 0; g < opt.num_param_groups(); ++g) base_lrs_.push_back(opt.lr(g));
}

LRScheduler::~LRScheduler() = default;

int64_t LRScheduler::last_epoch() const {
  if (parent_ != nullptr && parent_->device_) return parent_->locate(parent_->last_epoch()).second;
  if (!device_) return last_epoch_;
  return device_->epoch.item<int64_t>();
}

double LRScheduler::last_lr() const {
  if (parent_ != nullptr && parent_->device_) return parent_->last_lr();
  if (!device_) return last_lr_;
  return device_->lrs.narrow(0, 0, 1).item<double>();
}

bool LRScheduler::enter_device() {
  if (device_) return true;
  auto d = std::make_unique<DeviceState>();
  if (!device_program(d->program)) return false;
  const Device device = opt_.parameters().front().device();
  const auto groups = static_cast<int64_t>(base_lrs_.size());
  d->epoch = scalar(static_cast<double>(last_epoch_), DType::int64).to(device);
  d->bases = tensor(base_lrs_, Shape{groups}, DType::float64).to(device);
  d->lrs = zeros(Shape{groups}, DType::float64, device);
  d->bound = last_epoch_;
  backend::advance_schedule(d->epoch, d->lrs, d->bases, Tensor(), d->program, false);
  device_ = std::move(d);
  return true;
}

void LRScheduler::leave_device() { device_.reset(); }

void LRScheduler::check_next() {
  if (!device_) {
    check_advance(last_epoch_ + 1);
    return;
  }
  try {
    check_advance(device_->bound + 1);
  } catch (const ValueError&) {
    // The bound may overstate the count (skipped steps): read it, then decide.
    device_->bound = last_epoch();
    check_advance(device_->bound + 1);
  }
}

void LRScheduler::advance_on_device(const Tensor& found_inf) {
  check_next();  // throws before anything changes
  DeviceState& d = *device_;
  const Tensor flag = !found_inf.defined() || found_inf.device() == d.epoch.device() ? found_inf
                                                                                     : found_inf.to(d.epoch.device());
  backend::advance_schedule(d.epoch, d.lrs, d.bases, flag, d.program, true);
  ++d.bound;
  // Every advance, as the host path's set_lr: a set_lr() by hand meanwhile is overwritten.
  for (size_t g = 0; g < base_lrs_.size(); ++g) opt_.set_lr_tensor(g, d.lrs.narrow(0, static_cast<int64_t>(g), 1));
}

double LRScheduler::apply(int64_t epoch) {
  std::vector<double> lrs;
  for (double base : base_lrs_) {
    lrs.push_back(lr_for(epoch, base));
    require(std::isfinite(lrs.back()) && lrs.back() >= 0,
            "the lr after " + std::to_string(epoch) + " steps would be " + num(lrs.back()) + "; nothing was changed");
  }
  for (size_t g = 0; g < lrs.size(); ++g) opt_.set_lr(g, lrs[g]);
  return lrs.front();
}

void LRScheduler::start() {
  const double lr = apply(0);
  last_epoch_ = 0;
  last_lr_ = lr;
  on_epoch();
}

void LRScheduler::require(bool ok, const std::string& what) const {
  if (!ok) throw ValueError(name_ + ": " + what);
}

void LRScheduler::step() {
  if (device_) {
    advance_on_device(Tensor());
    return;
  }
  const int64_t next = last_epoch_ + 1;
  check_advance(next);
  const double lr = apply(next);  // throws (ValueError) before anything here changes
  last_epoch_ = next;
  last_lr_ = lr;
  on_epoch();
}

void LRScheduler::step(amp::GradScaler& scaler) {
  const Tensor flag = scaler.found_inf();  // undefined when disabled or before any unscale: no overflow
  if (flag.defined() && enter_device()) {
    advance_on_device(flag);
    return;
  }
  if (!scaler.found_non_finite()) step();
}

std::vector<std::string> LRScheduler::base_lr_keys() const {
  std::vector<std::string> keys{"base_lr"};
  for (size_t g = 1; g < base_lrs_.size(); ++g) keys.push_back("base_lr." + std::to_string(g));
  return keys;
}

StateDict LRScheduler::state_dict() const {
  StateDict out;
  out.insert("last_epoch", scalar(static_cast<double>(last_epoch()), DType::int64));
  out.insert("base_lr", scalar(base_lrs_[0], DType::float64));
  for (size_t g = 1; g < base_lrs_.size(); ++g)
    out.insert("base_lr." + std::to_string(g), scalar(base_lrs_[g], DType::float64));
  for (const auto& [k, v] : options()) out.insert("options." + k, scalar(v, DType::float64));
  save_extra(out);
  return out;
}

void LRScheduler::check_state_dict(const StateDict& dict) const {
  const std::vector<std::string> expected_keys = state_dict().keys();
  const std::set<std::string> expected(expected_keys.begin(), expected_keys.end());
  for (const auto& [k, t] : dict) {
    require(expected.count(k) == 1, "load_state_dict: unexpected key \"" + k + "\"");
    require(t.defined() && t.numel() == 1, "load_state_dict: \"" + k + "\" must hold one value");
  }
  for (const auto& k : expected) require(dict.contains(k), "load_state_dict: missing key \"" + k + "\"");

  const double epoch = dict.at("last_epoch").item<double>();
  require(is_int(epoch) && epoch >= 0, "load_state_dict: last_epoch must be an integer >= 0, got " + num(epoch));
  for (const std::string& key : base_lr_keys()) {
    const double base = dict.at(key).item<double>();
    require(std::isfinite(base) && base >= 0, "load_state_dict: " + key + " must be finite and >= 0, got " + num(base));
  }
  Options o = options();
  for (auto& [k, v] : o) v = dict.at("options." + k).item<double>();
  check_options(o);
  check_loaded_epoch(static_cast<int64_t>(epoch), o);
  check_extra(dict);
}

void LRScheduler::load_state_dict(const StateDict& dict) {
  check_state_dict(dict);
  load_extra(dict);
  Options o = options();
  for (auto& [k, v] : o) v = dict.at("options." + k).item<double>();
  set_options(o);
  const std::vector<std::string> keys = base_lr_keys();
  for (size_t g = 0; g < keys.size(); ++g) base_lrs_[g] = dict.at(keys[g]).item<double>();
  last_epoch_ = static_cast<int64_t>(dict.at("last_epoch").item<double>());
  last_lr_ = apply(last_epoch_);
  leave_device();  // the host state is the truth again; the next step(scaler) moves it back
  on_epoch();
}

// ---------------------------------------------------------------- StepLR

StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma)
    : LRScheduler(opt, "StepLR"), step_size_(step_size), gamma_(gamma) {
  check_options(options());
  start();
}

kernels::ScheduleForm StepLR::form() const { return {.kind = kernels::ScheduleForm::step, .a = gamma_, .n = step_size_}; }

double StepLR::lr_for(int64_t epoch, double base_lr) const { return kernels::schedule_lr(form(), epoch, base_lr); }

bool StepLR::device_program(kernels::ScheduleProgram& program) const {
  return gamma_ <= 1.0 && single(program, form());  // a growing lr can overflow: the host checks each one
}

LRScheduler::Options StepLR::options() const {
  return {{"step_size", static_cast<double>(step_size_)}, {"gamma", gamma_}};
}

void StepLR::check_options(const Options& o) const {
  const double step_size = o.at("step_size"), gamma = o.at("gamma");
  require(is_int(step_size) && step_size >= 1, "step_size must be an integer >= 1, got " + num(step_size));
  require(std::isfinite(gamma) && gamma >= 0, "gamma must be finite and >= 0, got " + num(gamma));
}

void StepLR::set_options(const Options& o) {
  step_size_ = static_cast<int64_t>(o.at("step_size"));
  gamma_ = o.at("gamma");
}

// ---------------------------------------------------------------- CosineAnnealingLR

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t T_max, double eta_min)
    : LRScheduler(opt, "CosineAnnealingLR"), t_max_(T_max), eta_min_(eta_min) {
  check_options(options());
  start();
}

kernels::ScheduleForm CosineAnnealingLR::form() const {
  return {.kind = kernels::ScheduleForm::cosine, .a = eta_min_, .n = t_max_};
}

double CosineAnnealingLR::lr_for(int64_t epoch, double base_lr) const {
  return kernels::schedule_lr(form(), epoch, base_lr);
}

bool CosineAnnealingLR::device_program(kernels::ScheduleProgram& program) const { return single(program, form()); }

LRScheduler::Options CosineAnnealingLR::options() const {
  return {{"T_max", static_cast<double>(t_max_)}, {"eta_min", eta_min_}};
}

void CosineAnnealingLR::check_options(const Options& o) const {
  const double t_max = o.at("T_max"), eta_min = o.at("eta_min");
  require(is_int(t_max) && t_max >= 1, "T_max must be an integer >= 1, got " + num(t_max));
  require(std::isfinite(eta_min) && eta_min >= 0, "eta_min must be finite and >= 0, got " + num(eta_min));
}

void CosineAnnealingLR::set_options(const Options& o) {
  t_max_ = static_cast<int64_t>(o.at("T_max"));
  eta_min_ = o.at("eta_min");
}

// ---------------------------------------------------------------- LinearLR

LinearLR::LinearLR(Optimizer& opt, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(opt, "LinearLR"), start_factor_(start_factor), end_factor_(end_factor), total_iters_(total_iters) {
  check_options(options());
  start();
}

kernels::ScheduleForm LinearLR::form() const {
  return {.kind = kernels::ScheduleForm::linear, .a = start_factor_, .b = end_factor_, .n = total_iters_};
}

double LinearLR::lr_for(int64_t epoch, double base_lr) const { return kernels::schedule_lr(form(), epoch, base_lr); }

bool LinearLR::device_program(kernels::ScheduleProgram& program) const { return single(program, form()); }

LRScheduler::Options LinearLR::options() const {
  return {{"start_factor", start_factor_},
          {"end_factor", end_factor_},
          {"total_iters", static_cast<double>(total_iters_)}};
}

void LinearLR::check_options(const Options& o) const {
  const double s = o.at("start_factor"), e = o.at("end_factor"), n = o.at("total_iters");
  require(s > 0 && s <= 1, "start_factor must be in (0, 1], got " + num(s));
  require(e >= 0 && e <= 1, "end_factor must be in [0, 1], got " + num(e));
  require(is_int(n) && n >= 1, "total_iters must be an integer >= 1, got " + num(n));
}

void LinearLR::set_options(const Options& o) {
  start_factor_ = o.at("start_factor");
  end_factor_ = o.at("end_factor");
  total_iters_ = static_cast<int64_t>(o.at("total_iters"));
}

// ---------------------------------------------------------------- OneCycleLR

OneCycleLR::OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, const OneCycleOptions& options)
    : LRScheduler(opt, "OneCycleLR"), max_lr_(max_lr), total_steps_(total_steps), o_(options) {
  check_options(this->options());
  start();
}

kernels::ScheduleForm OneCycleLR::form() const {
  return {.kind = kernels::ScheduleForm::one_cycle,
          .a = max_lr_,
          .b = o_.div_factor,
          .c = o_.final_div_factor,
          .d = o_.pct_start,
          .n = total_steps_,
          .linear_anneal = o_.anneal_strategy == AnnealStrategy::linear,
          .three_phase = o_.three_phase};
}

double OneCycleLR::lr_for(int64_t epoch, double base_lr) const {
  // The cycle runs between max_lr / div_factor and max_lr, as PyTorch's with one max_lr: the base lr is not used.
  return kernels::schedule_lr(form(), epoch, base_lr);
}

bool OneCycleLR::device_program(kernels::ScheduleProgram& program) const { return single(program, form()); }

LRScheduler::Options OneCycleLR::options() const {
  return {{"max_lr", max_lr_},
          {"total_steps", static_cast<double>(total_steps_)},
          {"pct_start", o_.pct_start},
          {"anneal_strategy", o_.anneal_strategy == AnnealStrategy::cos ? 0.0 : 1.0},
          {"div_factor", o_.div_factor},
          {"final_div_factor", o_.final_div_factor},
          {"three_phase", o_.three_phase ? 1.0 : 0.0}};
}

void OneCycleLR::check_options(const Options& o) const {
  const double max_lr = o.at("max_lr"), total = o.at("total_steps"), pct = o.at("pct_start");
  const double anneal = o.at("anneal_strategy"), div = o.at("div_factor"), final_div = o.at("final_div_factor");
  const double three = o.at("three_phase");
  require(std::isfinite(max_lr) && max_lr > 0, "max_lr must be finite and > 0, got " + num(max_lr));
  require(is_int(total) && total >= 1, "total_steps must be an integer >= 1, got " + num(total));
  require(pct >= 0 && pct <= 1, "pct_start must be in [0, 1], got " + num(pct));
  require(anneal == 0 || anneal == 1, "anneal_strategy must be 0 (cos) or 1 (linear), got " + num(anneal));
  require(std::isfinite(div) && div > 0, "div_factor must be finite and > 0, got " + num(div));
  require(std::isfinite(final_div) && final_div > 0, "final_div_factor must be finite and > 0, got " + num(final_div));
  require(three == 0 || three == 1, "three_phase must be 0 or 1, got " + num(three));
}

void OneCycleLR::set_options(const Options& o) {
  max_lr_ = o.at("max_lr");
  total_steps_ = static_cast<int64_t>(o.at("total_steps"));
  o_.pct_start = o.at("pct_start");
  o_.anneal_strategy = o.at("anneal_strategy") == 0 ? AnnealStrategy::cos : AnnealStrategy::linear;
  o_.div_factor = o.at("div_factor");
  o_.final_div_factor = o.at("final_div_factor");
  o_.three_phase = o.at("three_phase") != 0;
}

void OneCycleLR::check_advance(int64_t epoch) const {
  require(epoch <= total_steps_,
          "tried to step " + std::to_string(epoch) + " times; total_steps is " + std::to_string(total_steps_));
}

void OneCycleLR::check_loaded_epoch(int64_t epoch, const Options& o) const {
  require(static_cast<double>(epoch) <= o.at("total_steps"), "load_state_dict: last_epoch " + std::to_string(epoch) +
                                                                   " is past total_steps " + num(o.at("total_steps")));
}

// ---------------------------------------------------------------- SequentialLR

SequentialLR::SequentialLR(Optimizer& opt, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(opt, "SequentialLR"), children_(std::move(schedulers)), milestones_(std::move(milestones)) {
  require(!children_.empty(), "needs at least one scheduler");
  for (size_t i = 0; i < children_.size(); ++i) {
    require(children_[i] != nullptr, "scheduler " + std::to_string(i) + " is null");
    require(&children_[i]->optimizer() == &opt,
            "scheduler " + std::to_string(i) + " (" + children_[i]->name() + ") wraps another optimizer");
  }
  require(milestones_.size() + 1 == children_.size(),
          "expects " + std::to_string(children_.size() - 1) + " milestones for " + std::to_string(children_.size()) +
              " schedulers, got " + std::to_string(milestones_.size()));
  check_options(options());
  // PyTorch's children share the optimizer's initial_lr: the lr from before
  // the first of them was built, not what that one then set.
  const LRScheduler* first = children_.front().get();
  for (const auto& c : children_)
    if (c->serial_ < first->serial_) first = c.get();
  const std::vector<double> base = first->base_lrs_;
  for (const auto& c : children_) c->base_lrs_ = base;
  // The SequentialLR itself may be built after its children changed the lr.
  base_lrs_ = base;
  for (const auto& c : children_) c->parent_ = this;
  start();
}

bool SequentialLR::device_program(kernels::ScheduleProgram& program) const {
  if (children_.size() > static_cast<size_t>(kernels::ScheduleProgram::kMaxForms)) return false;
  program.count = static_cast<int32_t>(children_.size());
  for (size_t i = 0; i < children_.size(); ++i) {
    kernels::ScheduleProgram child;
    if (!children_[i]->device_program(child) || child.count != 1) return false;  // nested: on the host
    program.forms[i] = child.forms[0];
  }
  for (size_t i = 0; i < milestones_.size(); ++i) program.milestones[i] = milestones_[i];
  return true;
}

std::pair<size_t, int64_t> SequentialLR::locate(int64_t epoch) const {
  const auto idx = static_cast<size_t>(std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin());
  return {idx, idx == 0 ? epoch : epoch - milestones_[idx - 1]};
}

double SequentialLR::lr_for(int64_t epoch, double base_lr) const {
  const auto [i, local] = locate(epoch);
  return children_[i]->lr_for(local, base_lr);
}

LRScheduler::Options SequentialLR::options() const {
  Options o;
  for (size_t i = 0; i < milestones_.size(); ++i) o["milestones." + std::to_string(i)] = static_cast<double>(milestones_[i]);
  return o;
}

void SequentialLR::check_options(const Options& o) const {
  double previous = 0;
  for (size_t i = 0; i < milestones_.size(); ++i) {
    const double m = o.at("milestones." + std::to_string(i));
    require(is_int(m) && m > previous,
            "milestones must be strictly increasing integers >= 1, got milestones[" + std::to_string(i) + "] = " + num(m));
    previous = m;
  }
}

void SequentialLR::set_options(const Options& o) {
  for (size_t i = 0; i < milestones_.size(); ++i)
    milestones_[i] = static_cast<int64_t>(o.at("milestones." + std::to_string(i)));
}

void SequentialLR::check_advance(int64_t epoch) const {
  const auto [i, local] = locate(epoch);
  children_[i]->check_advance(local);
}

void SequentialLR::on_epoch() {
  const auto [i, local] = locate(last_epoch());
  children_[i]->last_epoch_ = local;
  children_[i]->last_lr_ = last_lr();
}

void SequentialLR::save_extra(StateDict& dict) const {
  for (size_t i = 0; i < children_.size(); ++i)
    for (const auto& [k, t] : children_[i]->state_dict()) dict.insert("schedulers." + std::to_string(i) + "." + k, t);
}

void SequentialLR::check_extra(const StateDict& dict) const {
  for (size_t i = 0; i < children_.size(); ++i)
    children_[i]->check_state_dict(sub_dict(dict, "schedulers." + std::to_string(i) + "."));
}

void SequentialLR::load_extra(const StateDict& dict) {
  for (size_t i = 0; i < children_.size(); ++i)
    children_[i]->load_state_dict(sub_dict(dict, "schedulers." + std::to_string(i) + "."));
}

}  // namespace mixgrad::optim
