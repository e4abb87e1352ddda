// mixgrad/state_dict.hpp — named tensors in insertion order: what modules and
// optimizers save and load (PyTorch's `state_dict`).
//
//   mg::StateDict sd = net.state_dict();       // "0.weight", "1.running_mean", ...
//   sd.at("0.weight").shape();
//   for (const auto& [name, t] : sd) std::cout << name << " " << t.shape() << "\n";
//   sd.erase("9.weight");                      // drop a head before fine-tuning
//   net.load_state_dict(sd, {.strict = false});
//
// Keys are unique; iteration follows insertion order. The tensors are
// whatever was inserted: Module::state_dict and Optimizer::state_dict insert
// snapshots (copies), so later training does not change a saved dict.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mixgrad/tensor.hpp"

namespace mixgrad {

class StateDict {
 public:
  using Item = std::pair<std::string, Tensor>;
  using const_iterator = std::vector<Item>::const_iterator;

  StateDict() = default;

  /// Adds `key` -> `value` at the end. Throws ValueError if the key exists,
  /// StateError if the tensor is undefined.
  void insert(std::string key, Tensor value);
  /// Replaces the value of an existing key, or inserts a new one at the end.
  void insert_or_assign(std::string key, Tensor value);
  /// Removes `key`; returns false if it was not there.
  bool erase(std::string_view key);

  bool contains(std::string_view key) const;
  /// The tensor under `key`; throws ValueError naming the key when missing.
  const Tensor& at(std::string_view key) const;
  /// The tensor under `key`, or nullptr.
  const Tensor* find(std::string_view key) const;

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  const_iterator begin() const { return items_.begin(); }
  const_iterator end() const { return items_.end(); }
  /// The keys in insertion order.
  std::vector<std::string> keys() const;

 private:
  std::vector<Item> items_;
  std::unordered_map<std::string, size_t> index_;  // key -> position in items_
};

}  // namespace mixgrad
