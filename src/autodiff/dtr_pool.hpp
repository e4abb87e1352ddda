// DTR's bookkeeping (mixgrad/autodiff/dtr.hpp): the kept segments of this
// thread, held weakly, and the eviction by h-DTR score. The segments
// themselves are autodiff::checkpoint's nodes (src/autodiff/checkpoint.cpp)
// run in their keeping mode.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "mixgrad/autodiff/dtr.hpp"
#include "mixgrad/device.hpp"

namespace mixgrad::dtr::detail {

/// What DTR may evict: a segment's kept graph.
class Evictable {
 public:
  virtual ~Evictable() = default;
  /// Frees what the segment holds; its backward recomputes it.
  virtual void evict() = 0;

  std::string name;
  Device device = Device::cpu();
  int64_t bytes = 0;          // held above its inputs and outputs
  double cost_seconds = 0;    // its forward's time: what a recomputation costs
  std::chrono::steady_clock::time_point ran;
  bool pinned = false;
};

/// The bytes held by tensors on `device` (the CPU's or that CUDA device's allocator).
int64_t allocated_on(Device device);

/// The options when DTR is on for this thread, else nullptr.
const Options* active();

/// Runs a segment's forward: marks it as the running segment (for pin())
/// while `forward` runs.
class RunningSegment {
 public:
  explicit RunningSegment(Evictable& segment);
  ~RunningSegment();
  RunningSegment(const RunningSegment&) = delete;
  RunningSegment& operator=(const RunningSegment&) = delete;

 private:
  Evictable* saved_;
};

/// Evicts by score until `bytes` more fit under the threshold (as far as
/// evictions go): before a segment runs (with the last one's bytes as its
/// estimate) and before an evicted one is recomputed.
void make_room(Device device, int64_t bytes);
/// What the last segment on this thread held (0 before the first).
int64_t last_segment_bytes();

/// Takes a segment that has just run: ValueError (naming it) when it alone
/// holds more than the threshold; else keeps it and evicts by score while the
/// allocated bytes exceed the threshold.
void track(const std::shared_ptr<Evictable>& segment);

/// Counts an evicted segment's recomputation, and evicts if it pushed the
/// allocated bytes over the threshold.
void recomputed(double seconds, Device device);

}  // namespace mixgrad::dtr::detail
