// DTR's bookkeeping (mixgrad/autodiff/dtr.hpp): the kept segments of this
// thread, held weakly, and the eviction of their parts by h-DTR score. The
// segments themselves are autodiff::checkpoint's nodes
// (src/autodiff/checkpoint.cpp) run in their keeping mode.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mixgrad/autodiff/dtr.hpp"
#include "mixgrad/device.hpp"

namespace mixgrad::dtr::detail {

/// A part of a segment DTR may evict, and what evicting it saves and costs.
struct Part {
  size_t index = 0;          // the segment's name for it
  int64_t bytes = 0;         // it frees (an estimate)
  double cost_seconds = 0;   // it adds to the segment's recomputation
  bool graph = false;        // the segment's recorded graph: evicting it means recomputing the segment
};

/// What DTR may evict: a segment's kept graph, in parts. First the graph
/// with what its ops saved, less the results of its products (matmuls,
/// attention), which stay for the recomputation to reuse; then those
/// results one by one, each then computed again too.
class Evictable {
 public:
  virtual ~Evictable() = default;
  /// What can be evicted now (empty when nothing is left).
  virtual std::vector<Part> parts() const = 0;
  /// Frees `part`, one of parts().
  virtual void evict(const Part& part) = 0;

  std::string name;
  Device device = Device::cpu();
  int64_t bytes = 0;          // held above its inputs and outputs
  double cost_seconds = 0;    // its forward's time: what a whole recomputation costs
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
