// The Runner's running sums, kept where the values are: each value a step
// returns is added to a float64 tensor on its device, so a training step
// reads nothing back; flush() brings the sums to the host Metrics at the
// print lines, the epoch's end and checkpoints (one read per sum).
//
// The sums are those the host would form, bit for bit: float64 adds of
// float64(value) * weight in the same order, from the host's value at the
// first add (what a resumed epoch starts from).
#pragma once

#include <map>
#include <string>

#include "mixgrad/tensor.hpp"
#include "mixgrad/train/runner.hpp"

namespace mixgrad::train::detail {

class DeviceSums {
 public:
  /// Sums into `host` (its "sum.<name>" and counters), which must outlive this.
  explicit DeviceSums(Metrics& host) : host_(host) {}

  /// host[key] += float64(value) * weight, on value's device (value: one
  /// element, any floating dtype; detached).
  void add(const std::string& key, const Tensor& value, double weight = 1.0);
  /// Writes every sum to the host Metrics.
  void flush();
  /// Forgets the device sums (after the host Metrics were cleared or loaded).
  void reset() { sums_.clear(); }

 private:
  Metrics& host_;
  std::map<std::string, Tensor> sums_;
};

}  // namespace mixgrad::train::detail
