#include "mixgrad/io/checkpoint.hpp"

#include <charconv>
#include <map>

#include "mixgrad/amp/autocast.hpp"
#include "mixgrad/amp/grad_scaler.hpp"
#include "mixgrad/data/data_loader.hpp"
#include "mixgrad/nn/module.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/optim/lr_scheduler.hpp"
#include "mixgrad/optim/optimizer.hpp"
#include "core/random_state.hpp"

namespace mixgrad::io {

namespace {

constexpr std::string_view kModel = "model.";
constexpr std::string_view kOptimizer = "optimizer.";
constexpr std::string_view kScaler = "scaler.";
constexpr std::string_view kScheduler = "scheduler.";
constexpr std::string_view kUser = "user.";
constexpr std::string_view kFilePrefix = "checkpoint-";
constexpr std::string_view kFileSuffix = ".safetensors";

// Metadata keys of the scalars.
const std::string kFormat = "mixgrad.format";
const std::string kFormatValue = "checkpoint";
const std::string kVersion = "mixgrad.format_version";
const std::string kVersionValue = "1";
const std::string kStep = "mixgrad.step";
const std::string kOptimizerName = "mixgrad.optimizer";
const std::string kSchedulerName = "mixgrad.scheduler";
const std::string kRngSeed = "mixgrad.rng.seed";
const std::string kRngCounter = "mixgrad.rng.counter";
const std::string kLoaderSeed = "mixgrad.loader.seed";
const std::string kLoaderEpoch = "mixgrad.loader.epoch";
const std::string kLoaderBatch = "mixgrad.loader.batch";
const std::string kLoaderSamples = "mixgrad.loader.samples";
const std::string kLoaderBatchSize = "mixgrad.loader.batch_size";
const std::string kAutocastEnabled = "mixgrad.autocast.enabled";
const std::string kAutocastLow = "mixgrad.autocast.low_prec_dtype";
const std::string kByDevice = "by_device";
const std::string kAutocastHigh = "mixgrad.autocast.high_prec_dtype";

constexpr DType kAllDTypes[] = {DType::float32, DType::float16, DType::bfloat16, DType::float64,
                                DType::int32,   DType::int64,   DType::bool_,    DType::int8,
                                DType::uint8};

// Turns the messages of a failed check into an IOError naming the file.
class Reader {
 public:
  Reader(std::filesystem::path path, Metadata meta) : path_(std::move(path)), meta_(std::move(meta)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw IOError("load_checkpoint: '" + path_.string() + "': " + what + "; nothing was loaded");
  }

  const std::string& get(const std::string& key) const {
    auto it = meta_.find(key);
    if (it == meta_.end()) fail("metadata key '" + key + "' is missing");
    return it->second;
  }

  template <class Int>
  Int integer(const std::string& key) const {
    const std::string& s = get(key);
    Int v{};
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || ptr != s.data() + s.size() || s.empty())
      fail("metadata '" + key + "' = '" + s + "' is not a valid integer");
    return v;
  }

  bool boolean(const std::string& key) const {
    const std::string& s = get(key);
    if (s != "true" && s != "false") fail("metadata '" + key + "' = '" + s + "', expected true or false");
    return s == "true";
  }

  DType dtype(const std::string& key) const {
    const std::string& s = get(key);
    for (DType d : kAllDTypes)
      if (to_string(d) == s) return d;
    fail("metadata '" + key + "' = '" + s + "' is not a dtype");
  }

  const Metadata& metadata() const { return meta_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  Metadata meta_;
};

// The loader's saved position, checked against `loader`: the shuffled order
// and the batches depend on the number of samples and the batch size, so a
// checkpoint of another data set (or batching) cannot continue exactly.
// Files written before positions were saved hold the epoch alone.
data::LoaderPosition read_loader_position(const Reader& r, const data::DataLoader& loader) {
  data::LoaderPosition at{.epoch = r.integer<int64_t>(kLoaderEpoch), .batch = 0};
  if (at.epoch < 0) r.fail("loader epoch " + std::to_string(at.epoch) + " is negative");
  if (!r.metadata().contains(kLoaderBatch)) return at;
  at.batch = r.integer<int64_t>(kLoaderBatch);
  const auto samples = r.integer<int64_t>(kLoaderSamples);
  const auto batch_size = r.integer<int64_t>(kLoaderBatchSize);
  if (samples != loader.dataset().size() || batch_size != loader.options().batch_size)
    r.fail("the data loader was saved over " + std::to_string(samples) + " samples in batches of " +
           std::to_string(batch_size) + ", but this loader has " + std::to_string(loader.dataset().size()) +
           " samples in batches of " + std::to_string(loader.options().batch_size) +
           ": its position and shuffled order would not continue the run");
  if (at.batch < 0 || at.batch > loader.size())
    r.fail("loader batch " + std::to_string(at.batch) + " is outside the epoch's [0, " +
           std::to_string(loader.size()) + "]");
  return at;
}

// The entries of `all` under `prefix`, with the prefix removed.
StateDict take_prefix(const StateDict& all, std::string_view prefix) {
  StateDict out;
  for (const auto& [key, t] : all)
    if (key.starts_with(prefix)) out.insert(key.substr(prefix.size()), t);
  return out;
}

// Parses "checkpoint-<digits>.safetensors"; nullopt for other names.
std::optional<int64_t> step_of(const std::string& name) {
  if (!name.starts_with(kFilePrefix) || !name.ends_with(kFileSuffix)) return std::nullopt;
  const char* first = name.data() + kFilePrefix.size();
  const char* last = name.data() + name.size() - kFileSuffix.size();
  if (first >= last) return std::nullopt;
  int64_t step = 0;
  auto [ptr, ec] = std::from_chars(first, last, step);
  if (ec != std::errc() || ptr != last || step < 0) return std::nullopt;
  return step;
}

// What load_checkpoint read and checked for each requested part, to be set.
struct Loaded {
  StateDict model, optimizer, scaler, scheduler;
  random_state::State rng{};
  uint64_t loader_seed = 0;
  data::LoaderPosition loader_at;
  amp::AutocastState autocast{};
};

// Step 2 of load_checkpoint: every requested part of `all` read and checked
// against its object; nothing is changed (IOError naming the file).
Loaded read_parts(const Reader& r, const StateDict& all, const Checkpoint& parts) {
  const auto check = [&](const char* part, auto&& f) {
    try {
      f();
    } catch (const IOError&) {
      throw;
    } catch (const Error& e) {
      r.fail(std::string(part) + " state does not fit: " + e.what());
    }
  };
  Loaded l;
  if (parts.model) {
    l.model = take_prefix(all, kModel);
    check("model", [&] { parts.model->check_state_dict(l.model); });
  }
  if (parts.optimizer) {
    const std::string& saved = r.get(kOptimizerName);
    if (saved != parts.optimizer->name())
      r.fail("holds " + saved + " state but the optimizer is " + parts.optimizer->name());
    l.optimizer = take_prefix(all, kOptimizer);
    check("optimizer", [&] { parts.optimizer->check_state_dict(l.optimizer); });
  }
  if (parts.scaler) {
    // Files written before the scaler's state became a StateDict hold every
    // entry as a 0-d float64; load_state_dict takes those as well.
    l.scaler = take_prefix(all, kScaler);
    for (const auto& [k, t] : l.scaler)
      if (t.ndim() != 0)
        r.fail("'" + std::string(kScaler) + k + "' is " + std::string(to_string(t.dtype())) + to_string(t.shape()) +
               ", expected a 0-d tensor");
    if (l.scaler.empty()) r.fail("holds no GradScaler state (no 'scaler.*' tensors)");
    check("GradScaler", [&] { parts.scaler->check_state_dict(l.scaler); });
  }
  if (parts.scheduler) {
    const std::string& saved = r.get(kSchedulerName);
    if (saved != parts.scheduler->name())
      r.fail("holds " + saved + " state but the scheduler is " + parts.scheduler->name());
    l.scheduler = take_prefix(all, kScheduler);
    check("scheduler", [&] { parts.scheduler->check_state_dict(l.scheduler); });
  }
  if (parts.rng) l.rng = {r.integer<uint64_t>(kRngSeed), r.integer<uint64_t>(kRngCounter)};
  if (parts.loader) {
    l.loader_seed = r.integer<uint64_t>(kLoaderSeed);
    l.loader_at = read_loader_position(r, *parts.loader);
  }
  if (parts.autocast) {
    const bool by_device = r.metadata().contains(kAutocastLow) && r.metadata().at(kAutocastLow) == kByDevice;
    l.autocast = {.enabled = r.boolean(kAutocastEnabled),
                  .low_prec_dtype = by_device ? amp::low_prec_dtype.load() : r.dtype(kAutocastLow),
                  .high_prec_dtype = r.dtype(kAutocastHigh),
                  .low_prec_dtype_by_device = by_device};
  }
  return l;
}

// Step 3: sets the parts. The optimizer goes first: it copies the most, so
// the one step that can still fail (out of memory) fails before the rest is set.
void commit(const Checkpoint& parts, const Loaded& l) {
  if (parts.optimizer) parts.optimizer->load_state_dict(l.optimizer);
  if (parts.scheduler) parts.scheduler->load_state_dict(l.scheduler);  // sets the optimizer's lr
  if (parts.model) parts.model->load_state_dict(l.model);
  if (parts.scaler) parts.scaler->load_state_dict(l.scaler);
  if (parts.loader) {
    parts.loader->set_seed(l.loader_seed);
    parts.loader->resume_at(l.loader_at);
  }
  if (parts.rng) random_state::set(l.rng);
  if (parts.autocast) {
    amp::enabled = l.autocast.enabled;
    if (l.autocast.low_prec_dtype_by_device)
      amp::low_prec_dtype.reset();
    else
      amp::low_prec_dtype = l.autocast.low_prec_dtype;
    amp::high_prec_dtype = l.autocast.high_prec_dtype;
  }
}

}  // namespace

std::filesystem::path checkpoint_path(const std::filesystem::path& dir, int64_t step) {
  if (step < 0) throw ValueError("checkpoint_path: step must be >= 0, got " + std::to_string(step));
  std::string digits = std::to_string(step);
  if (digits.size() < 8) digits.insert(0, 8 - digits.size(), '0');
  return dir / (std::string(kFilePrefix) + digits + std::string(kFileSuffix));
}

std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& dir) {
  std::error_code ec;
  std::optional<std::pair<int64_t, std::filesystem::path>> best;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (!entry.is_regular_file(ec)) continue;
    const auto step = step_of(entry.path().filename().string());
    if (step && (!best || *step > best->first)) best.emplace(*step, entry.path());
  }
  if (ec) throw IOError("latest_checkpoint: cannot list '" + dir.string() + "': " + ec.message());
  if (!best) return std::nullopt;
  return best->second;
}

std::filesystem::path save_checkpoint(const std::filesystem::path& dir_or_file, const Checkpoint& parts) {
  if (parts.step < 0) throw ValueError("save_checkpoint: step must be >= 0, got " + std::to_string(parts.step));
  StateDict all;
  Metadata meta{{kFormat, kFormatValue}, {kVersion, kVersionValue}, {kStep, std::to_string(parts.step)}};
  if (parts.model)
    for (const auto& [k, t] : parts.model->state_dict()) all.insert(std::string(kModel) + k, t);
  if (parts.optimizer) {
    for (const auto& [k, t] : parts.optimizer->state_dict()) all.insert(std::string(kOptimizer) + k, t);
    meta[kOptimizerName] = parts.optimizer->name();
  }
  if (parts.scaler)
    for (const auto& [k, t] : parts.scaler->state_dict()) all.insert(std::string(kScaler) + k, t);
  if (parts.scheduler) {
    for (const auto& [k, t] : parts.scheduler->state_dict()) all.insert(std::string(kScheduler) + k, t);
    meta[kSchedulerName] = parts.scheduler->name();
  }
  if (parts.loader) {
    const data::LoaderPosition at = parts.loader->position();
    meta[kLoaderSeed] = std::to_string(parts.loader->seed());
    meta[kLoaderEpoch] = std::to_string(at.epoch);
    meta[kLoaderBatch] = std::to_string(at.batch);
    meta[kLoaderSamples] = std::to_string(parts.loader->dataset().size());
    meta[kLoaderBatchSize] = std::to_string(parts.loader->options().batch_size);
  }
  if (parts.rng) {
    const random_state::State s = random_state::get();
    meta[kRngSeed] = std::to_string(s.seed);
    meta[kRngCounter] = std::to_string(s.counter);
  }
  if (parts.autocast) {
    meta[kAutocastEnabled] = amp::enabled.load() ? "true" : "false";
    // "by_device" when none was chosen, so a restore keeps the per-device
    // default (bfloat16 on the CPU, float16 on CUDA) instead of pinning one.
    meta[kAutocastLow] =
        amp::low_prec_dtype.is_set() ? std::string(to_string(amp::low_prec_dtype.load())) : kByDevice;
    meta[kAutocastHigh] = std::string(to_string(amp::high_prec_dtype.load()));
  }
  for (const auto& [k, v] : parts.metadata) meta[std::string(kUser) + k] = v;

  std::error_code ec;
  const std::filesystem::path path =
      std::filesystem::is_directory(dir_or_file, ec) ? checkpoint_path(dir_or_file, parts.step) : dir_or_file;
  save_file(all, path, meta);
  return path;
}

CheckpointInfo load_checkpoint(const std::filesystem::path& dir_or_file, const Checkpoint& parts) {
  std::filesystem::path path = dir_or_file;
  std::error_code ec;
  if (std::filesystem::is_directory(dir_or_file, ec)) {
    auto latest = latest_checkpoint(dir_or_file);
    if (!latest) throw IOError("load_checkpoint: no checkpoint-<step>.safetensors in '" + dir_or_file.string() + "'");
    path = *latest;
  }

  // 1. The file: its structure and checksum (IOError from load_file).
  Metadata meta;
  const StateDict all = load_file(path, &meta);
  const Reader r(path, std::move(meta));
  if (r.get(kFormat) != kFormatValue)
    r.fail("metadata '" + kFormat + "' is '" + r.get(kFormat) + "', expected '" + kFormatValue + "'");
  if (r.get(kVersion) != kVersionValue)
    r.fail("format version '" + r.get(kVersion) + "' is not supported (this build reads " + kVersionValue + ")");

  CheckpointInfo info{.path = path, .step = r.integer<int64_t>(kStep), .metadata = {}};
  if (info.step < 0) r.fail("step " + std::to_string(info.step) + " is negative");
  for (const auto& [k, v] : r.metadata())
    if (k.starts_with(kUser)) info.metadata.emplace(k.substr(kUser.size()), v);

  // 2. Every requested part against its object; nothing is changed yet. 3. Set them.
  commit(parts, read_parts(r, all, parts));
  return info;
}

}  // namespace mixgrad::io
