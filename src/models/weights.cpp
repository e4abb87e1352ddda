#include "mixgrad/models/weights.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "mixgrad/error.hpp"
#include "mixgrad/io/safetensors.hpp"
#include "mixgrad/nn/batch_norm.hpp"

namespace mixgrad::models {

namespace {

constexpr std::string_view kCounter = "num_batches_tracked";

// The dotted names of the BatchNorm2d modules in `m` and below ("" for m itself).
void batch_norm_names(const nn::Module& m, const std::string& prefix, std::unordered_set<std::string>& out) {
  if (dynamic_cast<const nn::BatchNorm2d*>(&m)) out.insert(prefix);
  for (const auto& [name, child] : m.named_children())
    batch_norm_names(*child, prefix.empty() ? name : prefix + "." + name, out);
}

// The module part of "<module>.num_batches_tracked", or nullopt for another key.
std::optional<std::string> counter_owner(const std::string& key) {
  if (key == kCounter) return std::string();
  const size_t n = key.size(), k = kCounter.size();
  if (n > k + 1 && key.compare(n - k, k, kCounter) == 0 && key[n - k - 1] == '.') return key.substr(0, n - k - 1);
  return std::nullopt;
}

// Up to 8 keys, quoted, and how many more.
std::string key_list(const std::vector<std::string>& keys) {
  std::string s;
  for (size_t i = 0; i < keys.size() && i < 8; ++i) s += (i ? ", '" : "'") + keys[i] + "'";
  if (keys.size() > 8) s += " and " + std::to_string(keys.size() - 8) + " more";
  return s;
}

// The keys first, before any shape: a file of another architecture shares
// some names with the model ("conv1.weight") under other shapes, and the
// keys are what tells it apart. ValueError naming the file and both lists.
void check_keys(const StateDict& dict, const nn::Module& model, const std::filesystem::path& path) {
  std::unordered_set<std::string> names;
  std::vector<std::string> missing, unexpected;
  for (const auto& list : {model.named_parameters(), model.named_buffers()})
    for (const auto& [name, t] : list) {
      names.insert(name);
      if (!dict.contains(name)) missing.push_back(name);
    }
  for (const auto& [key, t] : dict)
    if (!names.contains(key)) unexpected.push_back(key);
  if (missing.empty() && unexpected.empty()) return;
  std::string msg = "models::load_weights: '" + path.string() + "' does not hold this model's weights (" +
                    model.describe() + ", another architecture or variant?);";
  if (!missing.empty()) msg += " missing keys: " + key_list(missing) + ";";
  if (!unexpected.empty()) msg += " unexpected keys: " + key_list(unexpected) + ";";
  throw ValueError(msg + " nothing was loaded");
}

// The error `e` again, of the same type, with the file named first.
[[noreturn]] void rethrow_naming(const std::filesystem::path& path, const Error& e) {
  const std::string msg = "models::load_weights: '" + path.string() + "': " + e.what();
  if (dynamic_cast<const ShapeError*>(&e)) throw ShapeError(msg);
  if (dynamic_cast<const DTypeError*>(&e)) throw DTypeError(msg);
  if (dynamic_cast<const ValueError*>(&e)) throw ValueError(msg);
  if (dynamic_cast<const IOError*>(&e)) throw IOError(msg);
  if (dynamic_cast<const DeviceError*>(&e)) throw DeviceError(msg);
  if (dynamic_cast<const OutOfMemoryError*>(&e)) throw OutOfMemoryError(msg);
  throw StateError(msg);
}

}  // namespace

StateDict strip_num_batches_tracked(const StateDict& dict, const nn::Module& model) {
  std::unordered_set<std::string> norms;
  batch_norm_names(model, "", norms);
  StateDict out;
  for (const auto& [key, t] : dict) {
    const auto owner = counter_owner(key);
    if (!owner || !norms.contains(*owner)) {
      out.insert(key, t);
      continue;
    }
    if (!is_integral(t.dtype()) || t.numel() != 1)
      throw ValueError("models::strip_num_batches_tracked: '" + key + "' is " + std::string(to_string(t.dtype())) +
                       " with " + std::to_string(t.numel()) +
                       " elements, not the integer count of batches PyTorch's BatchNorm2d saves");
  }
  return out;
}

void load_weights(nn::Module& model, const std::filesystem::path& path) {
  const StateDict file = io::load_file(path);  // IOError names the file
  StateDict dict;
  try {
    dict = strip_num_batches_tracked(file, model);
  } catch (const Error& e) {
    rethrow_naming(path, e);
  }
  check_keys(dict, model, path);
  try {
    model.load_state_dict(dict);  // shapes and dtypes, then the copies
  } catch (const Error& e) {
    rethrow_naming(path, e);
  }
}

}  // namespace mixgrad::models
