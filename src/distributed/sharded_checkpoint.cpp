// ShardedOptimizer's checkpoints: one safetensors file per rank, holding the
// rank's range of every state buffer as one flat tensor, so that a run on
// another number of ranks reads the ranges it overlaps and reshards.
//
// A file's tensors: "layout.numels" (int64, each parameter's element count),
// "layout.range" (int64 [begin, end)), "steps" (int64 per parameter: its
// update count, 0 never updated, -1 not in this range), "shard.values" (the
// shard: the float32 master weights under master_weights), "shard.<buffer>"
// (each state buffer of the wrapped optimizer, zeros for a piece never
// updated) and "optimizer.<key>" (its hyper-parameters). Metadata:
// "mixgrad.optimizer" (its name), "mixgrad.sharded.world_size" and "rank".
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "backend/copy.hpp"
#include "distributed/sharded_state.hpp"
#include "mixgrad/autodiff/no_grad.hpp"
#include "mixgrad/error.hpp"
#include "mixgrad/io/safetensors.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/shape_ops.hpp"

namespace mixgrad::distributed {

namespace {

namespace fs = std::filesystem;
constexpr const char* kWhere = "distributed::ShardedOptimizer: ";

fs::path shard_file(const fs::path& dir, int rank, int world) {
  return dir / ("optimizer-shard-" + std::to_string(rank) + "-of-" + std::to_string(world) + ".safetensors");
}

// "state.<j>.<name>" -> (j, name), for the wrapped optimizer's per-piece keys.
bool split_state_key(const std::string& key, size_t& piece, std::string& name) {
  if (key.rfind("state.", 0) != 0) return false;
  const size_t dot = key.find('.', 6);
  if (dot == std::string::npos) return false;
  piece = std::stoul(key.substr(6, dot - 6));
  name = key.substr(dot + 1);
  return true;
}

// The world size of the run whose files are in `dir`; IOError when there
// are none, when runs of several sizes are mixed, or for missing ranks.
int saved_world_size(const fs::path& dir) {
  const std::regex name(R"(optimizer-shard-(\d+)-of-(\d+)\.safetensors)");
  std::map<int, std::set<int>> ranks;  // world size -> ranks found
  if (fs::is_directory(dir))
    for (const auto& entry : fs::directory_iterator(dir)) {
      std::smatch m;
      const std::string file = entry.path().filename().string();
      if (std::regex_match(file, m, name)) ranks[std::stoi(m[2])].insert(std::stoi(m[1]));
    }
  if (ranks.empty()) throw IOError(std::string(kWhere) + "no optimizer-shard-R-of-W.safetensors in " + dir.string());
  if (ranks.size() > 1)
    throw IOError(std::string(kWhere) + dir.string() + " holds shards of runs on several world sizes");
  const auto& [world, found] = *ranks.begin();
  std::string missing;
  for (int r = 0; r < world; ++r)
    if (!found.count(r)) missing += (missing.empty() ? "" : ", ") + shard_file(dir, r, world).string();
  if (!missing.empty()) throw IOError(std::string(kWhere) + "missing shards: " + missing);
  return world;
}

std::string list(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

}  // namespace

void ShardedOptimizer::save(const fs::path& dir) const {
  const Impl& m = *impl_;
  autodiff::no_grad guard;
  const StateDict inner = m.opt ? m.opt->state_dict() : StateDict();
  StateDict out;
  out.insert("layout.numels", tensor<int64_t>(m.numels, Shape{static_cast<int64_t>(m.numels.size())}));
  out.insert("layout.range", tensor<int64_t>({m.range.begin, m.range.end}, Shape{2}));
  std::vector<int64_t> steps(m.numels.size(), -1);
  for (const ShardPiece& p : m.pieces) steps[p.param] = 0;
  std::map<std::string, std::vector<Tensor>> buffers;  // name -> the pieces' buffers
  for (const auto& [key, t] : inner) {
    size_t j = 0;
    std::string name;
    if (!split_state_key(key, j, name)) {
      out.insert("optimizer." + key, t);
    } else if (name == "step") {
      steps[m.pieces[j].param] = t.item<int64_t>();
    } else {
      buffers[name].resize(m.pieces.size());
      buffers[name][j] = t;
    }
  }
  out.insert("steps", tensor<int64_t>(steps, Shape{static_cast<int64_t>(steps.size())}));
  const int64_t n = m.range.end - m.range.begin;
  out.insert("shard.values", m.shard.empty() ? zeros({0}, m.shard_dtype) : F::concat(m.shard, 0).to(Device::cpu()));
  for (auto& [name, parts] : buffers) {
    DType d = DType::float32;
    for (const Tensor& t : parts)
      if (t.defined()) d = t.dtype();
    for (size_t j = 0; j < parts.size(); ++j)
      parts[j] = parts[j].defined() ? F::reshape(parts[j], {-1}).to(Device::cpu()) : zeros({m.pieces[j].length}, d);
    out.insert("shard." + name, n ? F::concat(parts, 0) : zeros({0}, d));
  }
  fs::create_directories(dir);
  io::save_file(out, shard_file(dir, m.group.rank(), m.group.world_size()),
                {{"mixgrad.optimizer", m.opt ? m.opt->name() : ""},
                 {"mixgrad.sharded.world_size", std::to_string(m.group.world_size())},
                 {"mixgrad.sharded.rank", std::to_string(m.group.rank())}});
}

namespace {

// The files of a saved run that overlap [begin, end), loaded and checked
// against this optimizer's parameters and kind.
struct SavedRange {
  std::vector<StateDict> files;
  std::vector<std::pair<int64_t, int64_t>> ranges;

  // This rank's range of the flat tensor `key`, from the files' pieces
  // (zeros where a file has none: no piece of that rank was ever updated).
  Tensor assemble(const std::string& key, int64_t begin, int64_t end) const {
    DType d = DType::float32;
    for (const StateDict& f : files)
      if (f.contains(key)) d = f.at(key).dtype();
    std::vector<Tensor> parts;
    for (size_t k = 0; k < files.size(); ++k) {
      const auto [fb, fe] = ranges[k];
      const int64_t lo = std::max(fb, begin), hi = std::min(fe, end);
      if (lo >= hi) continue;
      parts.push_back(files[k].contains(key) ? files[k].at(key).narrow(0, lo - fb, hi - lo) : zeros({hi - lo}, d));
    }
    return parts.empty() ? zeros({0}, d) : F::concat(parts, 0).contiguous();
  }
};

SavedRange read_range(const fs::path& dir, int world, const std::vector<int64_t>& numels, int64_t total, int64_t begin,
                      int64_t end, const std::string& optimizer) {
  const int64_t per = flat_range(total, world, 0).per_rank;
  const int first = end > begin ? static_cast<int>(begin / per) : 0;
  const int last = end > begin ? static_cast<int>((end - 1) / per) : 0;
  SavedRange saved;
  for (int q = first; q <= last; ++q) {
    const fs::path file = shard_file(dir, q, world);
    io::Metadata meta;
    StateDict f = io::load_file(file, &meta);
    const std::vector<int64_t> theirs = f.at("layout.numels").to_vector<int64_t>();
    if (theirs != numels)
      throw ValueError(std::string(kWhere) + file.string() + " is the checkpoint of another model: its " +
                       std::to_string(theirs.size()) + " parameters have " + list(theirs) + " elements, this " +
                       "optimizer's " + std::to_string(numels.size()) + " have " + list(numels));
    if (!optimizer.empty() && !meta["mixgrad.optimizer"].empty() && meta["mixgrad.optimizer"] != optimizer)
      throw ValueError(std::string(kWhere) + file.string() + " holds the state of " + meta["mixgrad.optimizer"] +
                       ", this optimizer wraps " + optimizer);
    const std::vector<int64_t> r = f.at("layout.range").to_vector<int64_t>();
    saved.ranges.emplace_back(r.at(0), r.at(1));
    saved.files.push_back(std::move(f));
  }
  return saved;
}

}  // namespace

void ShardedOptimizer::load(const fs::path& dir) {
  Impl& m = *impl_;
  autodiff::no_grad guard;
  const int64_t begin = m.range.begin, end = m.range.end;
  const SavedRange saved =
      read_range(dir, saved_world_size(dir), m.numels, m.total, begin, end, m.opt ? m.opt->name() : std::string());
  std::vector<int64_t> steps(m.numels.size(), -1);
  std::set<std::string> buffers;
  StateDict dict;
  for (const StateDict& f : saved.files) {
    const std::vector<int64_t> s = f.at("steps").to_vector<int64_t>();
    for (size_t i = 0; i < s.size(); ++i) steps[i] = std::max(steps[i], s[i]);
    for (const auto& [key, t] : f)
      if (key.rfind("shard.", 0) == 0 && key != "shard.values") buffers.insert(key.substr(6));
  }
  for (const auto& [key, t] : saved.files.front())
    if (key.rfind("optimizer.", 0) == 0) dict.insert(key.substr(10), t);
  std::map<std::string, Tensor> flat;
  for (const std::string& name : buffers) flat[name] = saved.assemble("shard." + name, begin, end);
  for (size_t j = 0; j < m.pieces.size(); ++j) {
    const ShardPiece& p = m.pieces[j];
    if (steps[p.param] <= 0) continue;
    const std::string prefix = "state." + std::to_string(j) + ".";
    dict.insert(prefix + "step", tensor<int64_t>({steps[p.param]}, Shape{}).to(m.device));
    for (const auto& [name, t] : flat)
      dict.insert(prefix + name, t.narrow(0, p.shard_offset, p.length).clone().to(m.device));
  }
  const Tensor values = saved.assemble("shard.values", begin, end);
  if (values.dtype() != m.shard_dtype)
    throw DTypeError(std::string(kWhere) + "the checkpoint's shard is " + std::string(to_string(values.dtype())) +
                     ", this one " + std::string(to_string(m.shard_dtype)) + " (master_weights differs?)");
  if (m.opt) m.opt->check_state_dict(dict);
  // Checked: from here on nothing throws for the checkpoint's sake.
  if (m.opt) m.opt->load_state_dict(dict);
  for (size_t j = 0; j < m.pieces.size(); ++j) {
    backend::copy(values.narrow(0, m.pieces[j].shard_offset, m.pieces[j].length).to(m.device), m.shard[j]);
    m.shard[j].bump_version();
  }
  m.reduced = false;
  m.gather();
}

}  // namespace mixgrad::distributed
