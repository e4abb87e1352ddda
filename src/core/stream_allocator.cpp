#include "core/stream_allocator.hpp"

#include <algorithm>
#include <string>

#include "mixgrad/error.hpp"

namespace mixgrad::core {

namespace {

Device device_of(DeviceType type, int index) { return type == DeviceType::cuda ? Device::cuda(index) : Device::cpu(); }

}  // namespace

StreamAllocator::StreamAllocator(DeviceMemoryApi& api, DeviceType type) : api_(api), type_(type) {}

StreamAllocator::~StreamAllocator() {
  try {
    empty_cache();
  } catch (...) {  // a failing device at shutdown: nothing left to do
  }
  for (int d = 0; d < static_cast<int>(devices_.size()); ++d) {
    if (!devices_[d]) continue;
    for (EventHandle e : devices_[d]->spare_events) api_.destroy_event(d, e);
  }
  for (auto& [p, b] : live_) delete b;  // the memory stays with its owners
}

StreamAllocator::DeviceState& StreamAllocator::state(int device) {
  if (device >= static_cast<int>(devices_.size())) devices_.resize(static_cast<size_t>(device) + 1);
  auto& s = devices_[static_cast<size_t>(device)];
  if (!s) s = std::make_unique<DeviceState>();
  return *s;
}

void StreamAllocator::cache(Block* b) {
  live_.erase(b->ptr);
  b->other_streams.clear();
  state(b->device).free[{b->stream, b->size}].push_back(b);
}

void StreamAllocator::process_events(bool wait, int device) {
  // Events complete in any order across streams, so every pending one is
  // looked at; the list holds one entry per (freed block, other stream).
  for (auto it = pending_.begin(); it != pending_.end();) {
    Block* b = it->block;
    if (device >= 0 && b->device != device) {
      ++it;
      continue;
    }
    if (wait) {
      api_.synchronize_event(b->device, it->event);
    } else if (!api_.query_event(b->device, it->event)) {
      ++it;
      continue;
    }
    state(b->device).spare_events.push_back(it->event);
    it = pending_.erase(it);
    if (--b->pending_events == 0) cache(b);
  }
}

void StreamAllocator::release_cached(int device) {
  for (int d = 0; d < static_cast<int>(devices_.size()); ++d) {
    if (!devices_[d] || (device >= 0 && d != device)) continue;
    DeviceState& s = *devices_[d];
    for (auto& [key, blocks] : s.free) {
      for (Block* b : blocks) {
        api_.free(d, b->ptr);
        s.stats.reserved -= b->size;
        delete b;
      }
    }
    s.free.clear();
  }
}

EventHandle StreamAllocator::take_event(int device) {
  auto& spare = state(device).spare_events;
  if (spare.empty()) return api_.create_event(device);
  EventHandle e = spare.back();
  spare.pop_back();
  return e;
}

void* StreamAllocator::allocate(int device, int64_t nbytes, StreamId stream) {
  if (nbytes < 0) throw ShapeError("StreamAllocator::allocate: negative size " + std::to_string(nbytes) + " bytes");
  if (device < 0) throw DeviceError("StreamAllocator::allocate: negative device index " + std::to_string(device));
  const int64_t size = block_size(nbytes);
  std::lock_guard lock(mutex_);
  if (!pending_.empty()) process_events(false, -1);
  DeviceState& s = state(device);
  Block* b = nullptr;
  auto it = s.free.find({stream, size});
  if (it != s.free.end() && !it->second.empty()) {
    b = it->second.back();
    it->second.pop_back();
  } else {
    void* p = api_.malloc(device, static_cast<size_t>(size));
    if (!p) {  // out of memory: wait for blocks held by events, give the cache back, retry once
      ++s.stats.oom_retries;
      process_events(true, device);
      release_cached(device);
      p = api_.malloc(device, static_cast<size_t>(size));
    }
    if (!p) {
      throw OutOfMemoryError("Storage: cannot allocate " + std::to_string(nbytes) + " bytes (a " +
                             std::to_string(size) + "-byte block) on " + to_string(device_of(type_, device)) +
                             ": out of device memory (" + std::to_string(s.stats.allocated) +
                             " bytes allocated, " + std::to_string(s.stats.reserved) + " reserved by mixgrad)");
    }
    b = new Block{p, size, device, stream, {}, 0};
    ++s.stats.device_mallocs;
    s.stats.reserved += size;
  }
  live_[b->ptr] = b;
  s.stats.allocated += size;
  s.stats.peak_allocated = std::max(s.stats.peak_allocated, s.stats.allocated);
  return b->ptr;
}

void StreamAllocator::release(void* p) noexcept {
  std::lock_guard lock(mutex_);
  auto it = live_.find(p);
  if (it == live_.end() || it->second->pending_events > 0) return;  // not ours, or freed twice
  Block* b = it->second;
  state(b->device).stats.allocated -= b->size;
  if (b->other_streams.empty()) {
    cache(b);
    return;
  }
  try {
    for (StreamId other : b->other_streams) {
      EventHandle e = take_event(b->device);
      try {
        api_.record_event(b->device, e, other);
      } catch (...) {
        state(b->device).spare_events.push_back(e);
        throw;
      }
      pending_.push_back({e, b});
      ++b->pending_events;
    }
  } catch (...) {
    // An event could not be recorded: the block cannot be proven idle on
    // every stream, so it is never reused (it stays reserved). The events
    // already recorded still retire through process_events.
    b->pending_events += 1 << 20;
  }
}

void StreamAllocator::record_stream(void* p, StreamId stream) {
  std::lock_guard lock(mutex_);
  auto it = live_.find(p);
  if (it == live_.end() || it->second->pending_events > 0)
    throw ValueError(std::string("record_stream: the pointer is not a live block of the ") +
                     (type_ == DeviceType::cuda ? "cuda" : "cpu") + " caching allocator");
  Block* b = it->second;
  if (stream == b->stream) return;
  if (std::find(b->other_streams.begin(), b->other_streams.end(), stream) == b->other_streams.end())
    b->other_streams.push_back(stream);
}

void StreamAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  process_events(true, -1);
  release_cached(-1);
}

StreamAllocatorStats StreamAllocator::stats(int device) const {
  std::lock_guard lock(mutex_);
  if (device < 0 || device >= static_cast<int>(devices_.size()) || !devices_[device]) return {};
  return devices_[device]->stats;
}

void StreamAllocator::reset_peak(int device) {
  std::lock_guard lock(mutex_);
  StreamAllocatorStats& s = state(device).stats;
  s.peak_allocated = s.allocated;
}

}  // namespace mixgrad::core
