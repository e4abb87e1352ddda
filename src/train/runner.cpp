#include "mixgrad/train/runner.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "mixgrad/amp/autocast.hpp"
#include "mixgrad/autodiff/no_grad.hpp"
#include "mixgrad/functional.hpp"
#include "mixgrad/io/checkpoint.hpp"
#include "mixgrad/nn/module.hpp"
#include "mixgrad/optim/clip_grad.hpp"
#include "mixgrad/optim/lr_scheduler.hpp"
#include "mixgrad/optim/optimizer.hpp"
#include "mixgrad/train/progress_bar.hpp"
#include "train/device_sums.hpp"
#include "train/metrics_csv.hpp"
#include "train/run_state.hpp"

namespace mixgrad::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Metric names go to CSV headers and checkpoint text: letters, digits, '_', '.', '-'.
void check_metric_name(const std::string& step, const std::string& name) {
  const auto ok = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-'; };
  if (name.empty() || !std::all_of(name.begin(), name.end(), ok))
    throw ValueError("Runner::" + step + " returned a value named '" + name +
                     "': names are letters, digits, '_', '.' and '-'");
}

// Adds each value of `out`, weighted by the batch's `n` samples, to the
// device sums "sum.<name>" of `host` (nothing is read back); counts the
// samples in host["samples"].
void add_to(detail::DeviceSums& sums, Metrics& host, const std::string& step, const StepOutput& out, int64_t n) {
  for (const auto& [name, t] : out) {
    check_metric_name(step, name);
    if (!t.defined() || t.numel() != 1)
      throw ShapeError("Runner::" + step + " returned '" + name + "' of shape " + to_string(t.shape()) +
                       ": each value must be one number");
  }
  for (const auto& [name, t] : out) sums.add("sum." + name, t, static_cast<double>(n));
  host["samples"] += static_cast<double>(n);
}

// The means of the sums, as "<prefix>_<name>".
void add_means(Metrics& m, const Metrics& sums, const std::string& prefix) {
  const auto n = sums.find("samples");
  if (n == sums.end() || n->second <= 0) return;
  for (const auto& [key, v] : sums)
    if (key.starts_with("sum.")) m[prefix + "_" + key.substr(4)] = v / n->second;
}

void print_epoch(const Metrics& m, int64_t epochs) {
  std::printf("epoch %lld/%lld", static_cast<long long>(m.at("epoch")), static_cast<long long>(epochs));
  for (const auto& [name, v] : m)
    if (name.find('_') != std::string::npos && name != "img_per_s" && name != "eval_seconds" &&
        name != "skipped_steps")
      std::printf("  %s %.4f", name.c_str(), v);
  std::printf("  (%.1f s, %.0f samples/s, %lld skipped)\n", m.at("seconds"), m.at("img_per_s"),
              static_cast<long long>(m.at("skipped_steps")));
  std::fflush(stdout);
}

bool is_checkpoint_name(const std::string& name) {
  return name.starts_with("checkpoint-") && name.ends_with(".safetensors");
}

}  // namespace

double StepInfo::loss() const { return loss_value.defined() ? loss_value.item<double>() : 0.0; }
double StepInfo::scale() const { return scale_value.defined() ? scale_value.item<double>() : 1.0; }
double StepInfo::lr() const { return lr_value.defined() ? lr_value.item<double>() : host_lr; }
bool StepInfo::skipped() const { return found_inf.defined() && found_inf.item<float>() != 0.0f; }

// What an epoch in progress keeps besides partial_ (which checkpoints hold).
struct Runner::EpochState {
  int64_t batches = 0;
  int64_t batch = 0;         // batches of the epoch done
  Tensor step_loss;          // the current step's loss on the device, summed over its micro-batches
  Tensor scale_used;         // the loss scale of the current step's backward (undefined: 1)
  double seconds_before = 0.0;  // the epoch's training time before a resume
  Clock::time_point start = Clock::now();
};

class Runner::Reporter {
 public:
  Reporter(const TrainConfig& c, int64_t steps_so_far, const std::vector<Metrics>& history) : c_(c) {
    if (c.main_process && !c.metrics_csv.empty()) csv = detail::MetricsCsv(c.metrics_csv, steps_so_far, history);
  }
  void begin_epoch(int64_t epoch, int64_t batches) {
    bar.emplace(epoch, c_.epochs, batches, c_.main_process && c_.progress_bar && stdout_is_terminal());
  }
  detail::MetricsCsv csv;
  std::optional<ProgressBar> bar;
  std::vector<StepInfo> rows;  // the CSV rows since the last read
  ProgressBar::Status shown;   // the values of the last read

 private:
  const TrainConfig& c_;
};

Runner::Runner(nn::Module& model, optim::Optimizer& optimizer, Criterion criterion)
    : model_(model),
      optimizer_(optimizer),
      criterion_(criterion ? std::move(criterion) : Criterion(cross_entropy)),
      sums_(std::make_unique<detail::DeviceSums>(partial_)) {}

Runner::~Runner() = default;

Tensor Runner::cross_entropy(const Tensor& output, const Tensor& target) { return F::cross_entropy(output, target); }

void Runner::add_loader(const std::string& name, data::DataLoader loader) {
  if (name != "train" && name != "val" && name != "test")
    throw ValueError("Runner::add_loader(\"" + name + "\"): the loaders are \"train\", \"val\" and \"test\"");
  if (loaders_.contains(name))
    throw StateError("Runner::add_loader(\"" + name + "\"): a \"" + name +
                     "\" loader was added already; a runner has one of each");
  loaders_.emplace(name, std::move(loader));
}

data::DataLoader& Runner::loader(const std::string& name) {
  auto it = loaders_.find(name);
  if (it == loaders_.end()) throw StateError("Runner::loader(\"" + name + "\"): no such loader was added");
  return it->second;
}

void Runner::train_config(TrainConfig c) {
  const auto require = [](bool ok, const std::string& what) {
    if (!ok) throw ValueError("Runner::train_config: " + what);
  };
  require(c.epochs >= 0, ".epochs must be >= 0, got " + std::to_string(c.epochs));
  require(c.checkpoint_every >= 0, ".checkpoint_every must be >= 0, got " + std::to_string(c.checkpoint_every));
  require(c.keep_checkpoints >= 0, ".keep_checkpoints must be >= 0, got " + std::to_string(c.keep_checkpoints));
  require(c.accumulate >= 1, ".accumulate must be >= 1, got " + std::to_string(c.accumulate));
  require(c.max_steps >= 0, ".max_steps must be >= 0, got " + std::to_string(c.max_steps));
  require(c.log_every >= 1, ".log_every must be >= 1, got " + std::to_string(c.log_every));
  require(!c.clip_grad_norm || (std::isfinite(*c.clip_grad_norm) && *c.clip_grad_norm > 0),
          ".clip_grad_norm must be finite and > 0");
  require(!c.resume || !c.checkpoint_dir.empty(), ".resume needs a .checkpoint_dir to resume from");
  require(!c.early_stopping || c.early_stopping->patience >= 1, ".early_stopping.patience must be >= 1");
  config_ = std::move(c);
}

StepOutput Runner::train_step(const data::Batch& batch) {
  return {{"loss", criterion_(model_(batch.images), batch.labels)}};
}

StepOutput Runner::val_step(const data::Batch& batch) {
  const Tensor output = model_(batch.images);
  const Tensor correct = F::eq(F::argmax(output, 1), batch.labels).to(DType::float32);
  return {{"loss", criterion_(output, batch.labels)}, {"accuracy", F::mean(correct)}};
}

StepOutput Runner::test_step(const data::Batch& batch) { return val_step(batch); }

void Runner::prepare() {
  if (!loaders_.contains("train"))
    throw StateError("Runner::run: no \"train\" loader; add one first: runner.add_loader(\"train\", loader)");
  if (gm_.attached_tensors().empty()) gm_.attach(model_.trainable_parameters());
  if (config_.checkpoint_dir.empty()) return;
  if (config_.resume && std::filesystem::is_directory(config_.checkpoint_dir) &&
      io::latest_checkpoint(config_.checkpoint_dir))
    load_checkpoint(config_.checkpoint_dir);
  if (!config_.main_process) return;
  std::filesystem::create_directories(config_.checkpoint_dir);
  // What a process killed while writing left: ".checkpoint-<step>.safetensors.tmp-<pid>-<n>".
  for (const auto& entry : std::filesystem::directory_iterator(config_.checkpoint_dir)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(".checkpoint-") && name.find(".safetensors.tmp-") != std::string::npos)
      std::filesystem::remove(entry.path());
  }
}

void Runner::run() {
  prepare();
  stop_requested_ = false;
  Reporter out(config_, step_, history_);
  data::DataLoader& train = loaders_.at("train");
  bool more = !(config_.max_steps > 0 && step_ >= config_.max_steps);
  bool mid_epoch = train.position().batch != 0;
  while (more) {
    const data::LoaderPosition at = train.position();
    epoch_ = at.epoch + 1;
    if (epoch_ > config_.epochs) break;
    if (at.batch == 0) {
      partial_.clear();
      sums_->reset();
    }
    model_.train();  // before the callbacks: one may put a frozen backbone in eval mode
    for (auto& f : epoch_begin_) f(*this, epoch_);
    EpochState st{.batches = train.size(), .batch = at.batch, .step_loss = Tensor(), .scale_used = Tensor(),
                  .seconds_before = partial_["seconds"]};
    out.begin_epoch(epoch_, st.batches);
    more = train_epoch(st, out);
    read_metrics(out);
    out.bar->finish();
    mid_epoch = !more;
    if (more) more = end_epoch(st, out);
  }
  // Stopped in the middle of an epoch (max_steps, stop()): a checkpoint to continue from.
  if (mid_epoch && saved_step_ != step_ && !config_.checkpoint_dir.empty() && config_.main_process) {
    save_checkpoint(config_.checkpoint_dir);
    prune_checkpoints();
  }
  if (has_loader("test") && !config_.test_each_epoch && !mid_epoch) {
    final_ = evaluate("test");
    if (config_.verbose && config_.main_process)
      for (const auto& [name, v] : final_) std::printf("%s %.4f\n", name.c_str(), v);
  }
}

bool Runner::train_epoch(EpochState& st, Reporter& out) {
  data::DataLoader& train = loaders_.at("train");
  const int64_t k = config_.accumulate;
  for (const data::Batch& batch : train) {
    const int64_t first = st.batch / k * k;  // the step's first micro-batch
    const int64_t group = std::min(k, st.batches - first);
    if (st.batch == first) {
      st.step_loss = Tensor();
      st.scale_used = scaler ? scaler->scale_tensor() : Tensor();
    }
    micro_batch(batch, 1.0 / static_cast<double>(group), st);
    ++st.batch;
    if (st.batch == first + group) {
      end_step(st, out, optimizer_step());
      // Stopping at the epoch's last batch lets the loop end: the epoch is complete, and end_epoch stops.
      if ((stop_requested_ || (config_.max_steps > 0 && step_ >= config_.max_steps)) && st.batch < st.batches)
        return false;
    }
    out.shown.batch = st.batch;
    out.shown.images = static_cast<int64_t>(partial_["samples"]);
    out.bar->update(out.shown);
  }
  return true;
}

void Runner::micro_batch(const data::Batch& batch, double share, EpochState& st) {
  // Without a scaler the global autocast switch (amp::enabled) stays the user's.
  std::optional<amp::autocast> scope;
  if (scaler) scope.emplace(true, config_.autocast_dtype);
  auto recording = gm_.record();
  const StepOutput out = train_step(batch);
  const auto loss = out.find("loss");
  if (loss == out.end()) throw StateError("Runner::train_step returned no \"loss\": return {{\"loss\", loss}, ...}");
  const Tensor part = share == 1.0 ? loss->second : loss->second * share;
  if (scaler)  // dy = scale; the gradients add up scaled until the optimizer step unscales them
    scaler->backward(gm_, part, Tensor(), {.unscale_grad = false, .update_scale = amp::UpdateScale::never});
  else
    gm_.backward(part);
  add_to(*sums_, partial_, "train_step", out, batch.images.size(0));
  const Tensor share_of_loss = loss->second.detach().reshape(Shape{}).to(DType::float64) * share;
  st.step_loss = st.step_loss.defined() ? st.step_loss + share_of_loss : share_of_loss;
}

// Unscale, clip, update the scale, step, clear; the scheduler per step.
// Returns the scaler's found-inf flag of the step (undefined without a
// scaler), where it lives: nothing is read back.
Tensor Runner::optimizer_step() {
  const std::vector<Tensor> params = gm_.attached_tensors();
  if (scaler) scaler->unscale(params);
  if (config_.clip_grad_norm) optim::clip_grad_norm(params, *config_.clip_grad_norm);
  const Tensor found_inf = scaler ? scaler->found_inf() : Tensor();
  if (scaler) scaler->update();
  optimizer_.step().clear_grad();  // skips the parameters of an overflowed step
  if (scheduler && config_.scheduler_interval == SchedulerInterval::step) {
    if (scaler)
      scheduler->step(*scaler);  // not on a skipped step, decided on the device
    else
      scheduler->step();
  }
  return found_inf;
}

// The step's bookkeeping: counts, the callbacks, the reads every log_every
// steps, the checkpoint.
void Runner::end_step(EpochState& st, Reporter& out, const Tensor& found_inf) {
  ++step_;
  if (found_inf.defined()) sums_->add("skipped_steps", found_inf);
  partial_["seconds"] = st.seconds_before + seconds_since(st.start);
  const Tensor lr = optimizer_.lr_tensor(0);
  StepInfo info{.step = step_, .epoch = epoch_, .batch = st.batch,
                .loss_value = st.step_loss, .scale_value = st.scale_used, .found_inf = found_inf,
                .lr_value = lr.defined() ? lr.clone() : Tensor(),  // the next advance overwrites lr
                .host_lr = lr.defined() ? 0.0 : optimizer_.lr()};
  for (auto& f : step_end_) f(*this, info);
  out.rows.push_back(std::move(info));
  if (step_ % config_.log_every == 0) read_metrics(out);
  maybe_checkpoint(false);
}

// Brings the device sums to partial_, the values the bar shows up to date,
// and writes the CSV rows since the last read.
void Runner::read_metrics(Reporter& out) {
  sums_->flush();
  const double samples = partial_["samples"];
  const auto sum = partial_.find("sum.loss");
  out.shown.loss = sum == partial_.end() || samples <= 0 ? 0.0 : sum->second / samples;
  out.shown.scale = scaler ? scaler->scale_factor() : 1.0;
  out.shown.skipped = static_cast<int64_t>(partial_["skipped_steps"]);
  for (const StepInfo& row : out.rows) out.csv.step(row);
  out.rows.clear();
}

Metrics Runner::evaluate(const std::string& name) {
  data::DataLoader& loader = loaders_.at(name);
  Metrics sums;
  model_.eval();
  {
    autodiff::no_grad nothing_recorded;
    std::optional<amp::autocast> scope;
    if (scaler) scope.emplace(true, config_.autocast_dtype);
    detail::DeviceSums device(sums);
    for (const data::Batch& batch : loader)
      add_to(device, sums, name + "_step", name == "val" ? val_step(batch) : test_step(batch), batch.images.size(0));
    device.flush();
  }
  model_.train();
  Metrics m;
  add_means(m, sums, name);
  return m;
}

bool Runner::end_epoch(EpochState& st, Reporter& out) {
  Metrics m{{"epoch", static_cast<double>(epoch_)}};
  add_means(m, partial_, "train");
  m["seconds"] = partial_["seconds"] = st.seconds_before + seconds_since(st.start);
  m["img_per_s"] = m["seconds"] > 0 ? partial_["samples"] / m["seconds"] : 0.0;
  m["skipped_steps"] = partial_["skipped_steps"];
  m["lr"] = optimizer_.lr();
  for (auto& f : train_end_) f(*this, epoch_);
  const auto eval_start = Clock::now();
  if (has_loader("val")) m.merge(evaluate("val"));
  if (has_loader("test") && config_.test_each_epoch) m.merge(evaluate("test"));
  m["eval_seconds"] = seconds_since(eval_start);
  history_.push_back(m);
  partial_.clear();
  out.csv.epoch(m);
  if (config_.verbose && config_.main_process) print_epoch(m, config_.epochs);
  // Per epoch the schedule advances whatever the epoch's last step did.
  if (scheduler && config_.scheduler_interval == SchedulerInterval::epoch) scheduler->step();
  const bool stop = early_stop(m);
  for (auto& f : epoch_end_) f(*this, m);
  maybe_checkpoint(true);
  return !stop && !stop_requested_ && !(config_.max_steps > 0 && step_ >= config_.max_steps);
}

bool Runner::early_stop(const Metrics& m) {
  if (!config_.early_stopping) return false;
  const EarlyStopping& e = *config_.early_stopping;
  const auto it = m.find(e.monitor);
  if (it == m.end())
    throw StateError("Runner: early stopping monitors '" + e.monitor + "', which this epoch's metrics lack");
  const double v = e.maximize ? it->second : -it->second;
  if (history_.size() == 1 || v > best_ + e.min_delta) {
    best_ = v;
    bad_epochs_ = 0;
    return false;
  }
  return ++bad_epochs_ >= e.patience;
}

void Runner::maybe_checkpoint(bool epoch_end) {
  if (config_.checkpoint_dir.empty() || !config_.main_process) return;
  if (!epoch_end && (config_.checkpoint_every == 0 || step_ % config_.checkpoint_every != 0)) return;
  save_checkpoint(config_.checkpoint_dir);
  prune_checkpoints();
}

void Runner::prune_checkpoints() {
  if (config_.keep_checkpoints == 0) return;
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(config_.checkpoint_dir))
    if (is_checkpoint_name(entry.path().filename().string())) files.push_back(entry.path());
  std::sort(files.begin(), files.end());  // zero-padded steps: by name is by step
  const auto keep = static_cast<size_t>(config_.keep_checkpoints);
  for (size_t i = 0; i + keep < files.size(); ++i) std::filesystem::remove(files[i]);
}

std::filesystem::path Runner::save_checkpoint(const std::filesystem::path& path) {
  sums_->flush();
  io::Metadata meta;
  detail::write_run_state({history_, partial_, best_, bad_epochs_}, meta);
  const auto file = io::save_checkpoint(path, {.model = &model_, .optimizer = &optimizer_, .scheduler = scheduler.get(),
                                    .scaler = scaler ? &*scaler : nullptr, .loader = &loader("train"),
                                    .step = step_, .rng = true, .autocast = false, .metadata = meta});
  saved_step_ = step_;
  return file;
}

void Runner::load_checkpoint(const std::filesystem::path& path) {
  std::filesystem::path file = path;
  if (std::filesystem::is_directory(path)) {
    auto latest = io::latest_checkpoint(path);
    if (!latest)
      throw IOError("Runner::load_checkpoint: no checkpoint-<step>.safetensors in '" + path.string() + "'");
    file = *latest;
  }
  // The runner's state is read and checked first, the rest by io::load_checkpoint: nothing changes on error.
  io::Metadata user;
  for (const auto& [k, v] : io::load_metadata(file))
    if (k.starts_with("user.")) user.emplace(k.substr(5), v);
  detail::RunState s = detail::read_run_state(user, file);
  const io::CheckpointInfo info =
      io::load_checkpoint(file, {.model = &model_, .optimizer = &optimizer_, .scheduler = scheduler.get(),
                                 .scaler = scaler ? &*scaler : nullptr, .loader = &loader("train"),
                                 .rng = true, .autocast = false});
  step_ = info.step;
  history_ = std::move(s.history);
  partial_ = std::move(s.partial);
  sums_->reset();
  best_ = s.best;
  bad_epochs_ = s.bad_epochs;
  const data::LoaderPosition at = loader("train").position();
  epoch_ = at.batch > 0 ? at.epoch + 1 : at.epoch;
}

}  // namespace mixgrad::train
