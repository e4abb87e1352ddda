#include "mixgrad/state_dict.hpp"

namespace mixgrad {

void StateDict::insert(std::string key, Tensor value) {
  if (!value.defined()) throw StateError("StateDict::insert: undefined tensor for key '" + key + "'");
  if (index_.contains(key)) throw ValueError("StateDict::insert: duplicate key '" + key + "'");
  index_.emplace(key, items_.size());
  items_.emplace_back(std::move(key), std::move(value));
}

void StateDict::insert_or_assign(std::string key, Tensor value) {
  if (!value.defined()) throw StateError("StateDict::insert_or_assign: undefined tensor for key '" + key + "'");
  if (auto it = index_.find(key); it != index_.end()) {
    items_[it->second].second = std::move(value);
    return;
  }
  insert(std::move(key), std::move(value));
}

bool StateDict::erase(std::string_view key) {
  auto it = index_.find(std::string(key));
  if (it == index_.end()) return false;
  items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(it->second));
  // Positions after the erased item shift by one; state dicts are small.
  index_.clear();
  for (size_t i = 0; i < items_.size(); ++i) index_.emplace(items_[i].first, i);
  return true;
}

bool StateDict::contains(std::string_view key) const { return index_.contains(std::string(key)); }

const Tensor* StateDict::find(std::string_view key) const {
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

const Tensor& StateDict::at(std::string_view key) const {
  if (const Tensor* t = find(key)) return *t;
  throw ValueError("StateDict::at: no key '" + std::string(key) + "'");
}

std::vector<std::string> StateDict::keys() const {
  std::vector<std::string> out;
  out.reserve(items_.size());
  for (const auto& [k, v] : items_) out.push_back(k);
  return out;
}

}  // namespace mixgrad
