#include <algorithm>
#include <cstdio>
#include <optional>
#include <vector>

#include "autodiff/dtr_pool.hpp"
#include "mixgrad/cuda.hpp"
#include "mixgrad/error.hpp"
#include "mixgrad/storage.hpp"

namespace mixgrad::dtr {

namespace {

struct ThreadState {
  std::optional<Options> options;
  std::vector<std::weak_ptr<detail::Evictable>> kept;
  Stats stats;
  detail::Evictable* running = nullptr;
  int64_t last_bytes = 0;  // what the last segment held: the next one's estimate
};

ThreadState& state() {
  thread_local ThreadState s;
  return s;
}

// "12.3 MiB", "45.6 KiB" or "789 bytes".
std::string bytes_text(int64_t bytes) {
  char buf[48];
  if (bytes >= (1 << 20))
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  else if (bytes >= 1024)
    std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(bytes) / 1024);
  else
    std::snprintf(buf, sizeof buf, "%lld bytes", static_cast<long long>(bytes));
  return buf;
}

}  // namespace

namespace detail {
int64_t allocated_on(Device device) {
  return device.is_cuda() ? cuda::memory_stats(device.index()).allocated : allocated_bytes();
}
}  // namespace detail

namespace {

// h-DTR's score of a part: recompute cost / (bytes x staleness); the lowest goes first.
double score(const detail::Evictable& e, const detail::Part& p, std::chrono::steady_clock::time_point now) {
  const double staleness = std::chrono::duration<double>(now - e.ran).count() + 1e-9;
  return (p.cost_seconds + 1e-9) / (static_cast<double>(p.bytes) * staleness);
}

struct Victim {
  std::shared_ptr<detail::Evictable> segment;
  detail::Part part;
  double score = 0;
};

// The evictable part on `device` with the lowest score, if any.
std::optional<Victim> lowest(ThreadState& s, Device device, std::chrono::steady_clock::time_point now) {
  std::optional<Victim> best;
  for (const auto& w : s.kept) {
    auto e = w.lock();
    if (!e || e->pinned || e->device != device) continue;
    for (const detail::Part& p : e->parts()) {
      if (p.bytes <= 0 || p.bytes < s.options->evictee_minimum_size) continue;
      const double sc = score(*e, p, now);
      if (!best || sc < best->score) best = Victim{e, p, sc};
    }
  }
  return best;
}

// Evicts by score while the allocated bytes on `device`, plus `room`, exceed the threshold.
void evict_to_threshold(ThreadState& s, Device device, int64_t room = 0) {
  std::erase_if(s.kept, [](const auto& w) { return w.expired(); });
  const auto now = std::chrono::steady_clock::now();
  while (true) {
    const int64_t allocated = detail::allocated_on(device);
    if (allocated + room <= s.options->eviction_threshold) return;
    std::optional<Victim> v = lowest(s, device, now);
    if (!v) return;  // nothing left to evict: the threshold is a target, not a wall
    v->segment->evict(v->part);
    ++(v->part.graph ? s.stats.evictions : s.stats.dropped_results);
    s.stats.evicted_bytes += std::max<int64_t>(allocated - detail::allocated_on(device), 0);
    if (v->segment->parts().empty())
      std::erase_if(s.kept, [&](const auto& w) { return w.lock() == v->segment; });
  }
}

}  // namespace

void enable(const Options& options) {
  if (options.eviction_threshold <= 0 || options.evictee_minimum_size < 0)
    throw ValueError("dtr::enable: eviction_threshold must be > 0 and evictee_minimum_size >= 0, got " +
                     std::to_string(options.eviction_threshold) + " and " +
                     std::to_string(options.evictee_minimum_size));
  state().options = options;
}

void disable() { state().options.reset(); }
bool is_enabled() { return state().options.has_value(); }

void pin() {
  if (detail::Evictable* e = state().running) e->pinned = true;
}

Stats stats() { return state().stats; }
void reset_stats() { state().stats = Stats{}; }

namespace detail {

const Options* active() {
  auto& s = state();
  return s.options ? &*s.options : nullptr;
}

RunningSegment::RunningSegment(Evictable& segment) : saved_(state().running) { state().running = &segment; }
RunningSegment::~RunningSegment() { state().running = saved_; }

void make_room(Device device, int64_t bytes) {
  ThreadState& s = state();
  if (s.options) evict_to_threshold(s, device, bytes);
}

int64_t last_segment_bytes() { return state().last_bytes; }

void track(const std::shared_ptr<Evictable>& segment) {
  ThreadState& s = state();
  if (!s.options) return;
  if (segment->bytes > s.options->eviction_threshold)
    throw ValueError("dtr::segment '" + segment->name + "': its forward keeps " + bytes_text(segment->bytes) +
                     ", more than the eviction threshold of " + bytes_text(s.options->eviction_threshold) +
                     " by itself; raise the threshold or split the segment");
  ++s.stats.segments;
  s.last_bytes = segment->bytes;
  s.kept.push_back(segment);
  evict_to_threshold(s, segment->device);
}

void recomputed(double seconds, Device device) {
  ThreadState& s = state();
  ++s.stats.recomputations;
  s.stats.recompute_seconds += seconds;
  if (s.options) evict_to_threshold(s, device);
}

}  // namespace detail

}  // namespace mixgrad::dtr
