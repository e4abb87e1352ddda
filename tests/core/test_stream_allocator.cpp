// The stream-ordered caching allocator (src/core/stream_allocator.hpp) driven
// by a fake device: host memory with a capacity, streams as counters of
// queued and finished work, and events whose completion the test decides.
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "core/stream_allocator.hpp"
#include "mixgrad/error.hpp"

namespace mg = mixgrad;
using mg::core::EventHandle;
using mg::core::StreamAllocator;
using mg::core::StreamId;

namespace {

constexpr StreamId kA = 1, kB = 2, kC = 3;

class FakeDevice : public mg::core::DeviceMemoryApi {
 public:
  explicit FakeDevice(int64_t capacity = int64_t{1} << 40) : capacity_(capacity) {}
  ~FakeDevice() override {
    for (auto& [p, n] : live_) std::free(p);
    for (Event* e : events_) delete e;
  }

  void* malloc(int device, size_t bytes) override {
    ++mallocs;
    const int64_t n = static_cast<int64_t>(bytes);
    if (used_[device] + n > capacity_) return nullptr;
    void* p = std::malloc(bytes);
    used_[device] += n;
    live_[p] = n;
    return p;
  }
  void free(int device, void* p) noexcept override {
    ++frees;
    used_[device] -= live_.at(p);
    live_.erase(p);
    std::free(p);
  }
  EventHandle create_event(int) override {
    ++events_created;
    auto* e = new Event;
    events_.insert(e);
    return e;
  }
  void destroy_event(int, EventHandle e) noexcept override {
    events_.erase(static_cast<Event*>(e));
    delete static_cast<Event*>(e);
  }
  void record_event(int, EventHandle h, StreamId stream) override {
    ++records;
    auto* e = static_cast<Event*>(h);
    e->stream = stream;
    e->target = queued_[stream];
  }
  bool query_event(int, EventHandle h) override {
    auto* e = static_cast<Event*>(h);
    return done_[e->stream] >= e->target;
  }
  void synchronize_event(int, EventHandle h) override {
    ++syncs;
    auto* e = static_cast<Event*>(h);
    done_[e->stream] = std::max(done_[e->stream], e->target);
  }

  /// Work is queued on `s` (a kernel launch that reads a block).
  void enqueue(StreamId s) { ++queued_[s]; }
  /// Everything queued on `s` so far has run.
  void finish(StreamId s) { done_[s] = queued_[s]; }
  int64_t used(int device) { return used_[device]; }
  size_t live_events() const { return events_.size(); }

  int mallocs = 0, frees = 0, events_created = 0, records = 0, syncs = 0;

 private:
  struct Event {
    StreamId stream = 0;
    uint64_t target = 0;
  };
  int64_t capacity_;
  std::map<int, int64_t> used_;
  std::map<void*, int64_t> live_;
  std::map<StreamId, uint64_t> queued_, done_;
  std::set<Event*> events_;
};

}  // namespace

BOOST_AUTO_TEST_CASE(stream_allocator_block_sizes_round_up_with_bounded_slack) {
  BOOST_TEST(StreamAllocator::block_size(0) == 512);
  BOOST_TEST(StreamAllocator::block_size(1) == 512);
  BOOST_TEST(StreamAllocator::block_size(512) == 512);
  BOOST_TEST(StreamAllocator::block_size(513) == 1024);
  BOOST_TEST(StreamAllocator::block_size(int64_t{1} << 20) == int64_t{1} << 20);
  BOOST_TEST(StreamAllocator::block_size((int64_t{1} << 20) + 1) == (int64_t{3} << 19));  // 1.5 MiB
  BOOST_TEST(StreamAllocator::block_size(int64_t{3} << 19) == (int64_t{3} << 19));
  BOOST_TEST(StreamAllocator::block_size((int64_t{3} << 19) + 1) == int64_t{2} << 20);
  for (int64_t n : {int64_t{1} << 21, int64_t{5'000'000}, int64_t{123'456'789}}) {
    const int64_t b = StreamAllocator::block_size(n);
    BOOST_TEST(b >= n);
    BOOST_TEST(b - n <= b / 3);
  }
  // The largest requests: no doubling past 2^61, so nothing wraps around.
  BOOST_TEST(StreamAllocator::block_size(int64_t{3} << 60) == (int64_t{3} << 60));
  BOOST_TEST(StreamAllocator::block_size((int64_t{3} << 60) + 1) == (int64_t{3} << 60) + 1);
  BOOST_TEST(StreamAllocator::block_size(int64_t{1} << 62) == int64_t{1} << 62);
  BOOST_TEST(StreamAllocator::block_size(INT64_MAX) == INT64_MAX);
}

BOOST_AUTO_TEST_CASE(stream_allocator_reuses_a_freed_block_on_its_stream_at_once) {
  FakeDevice dev;
  StreamAllocator alloc(dev, mg::DeviceType::cuda);
  void* p = alloc.allocate(0, 1000, kA);
  dev.enqueue(kA);  // still running on A: same-stream reuse need not wait
  alloc.release(p);
  BOOST_TEST(alloc.allocate(0, 1000, kA) == p);
  BOOST_TEST(dev.mallocs == 1);
  BOOST_TEST(dev.records == 0);  // no event for same-stream reuse
}

BOOST_AUTO_TEST_CASE(stream_allocator_serves_requests_of_one_size_class_from_one_block) {
  FakeDevice dev;
  StreamAllocator alloc(dev, mg::DeviceType::cuda);
  void* p = alloc.allocate(0, 600, kA);  // class 1024
  alloc.release(p);
  BOOST_TEST(alloc.allocate(0, 1024, kA) == p);
  void* q = alloc.allocate(0, 1025, kA);  // class 1536: a new block
  BOOST_TEST(q != p);
  BOOST_TEST(dev.mallocs == 2);
  BOOST_TEST(alloc.stats(0).reserved == 1024 + 1536);
}

BOOST_AUTO_TEST_CASE(stream_allocator_never_hands_a_block_to_another_stream_or_device) {
  FakeDevice dev;
  StreamAllocator alloc(dev, mg::DeviceType::cuda);
  void* p = alloc.allocate(0, 4096, kA);
  alloc.release(p);
  void* on_b = alloc.allocate(0, 4096, kB);
  void* on_1 = alloc.allocate(1, 4096, kA);
  BOOST_TEST(on_b != p);
  BOOST_TEST(on_1 != p);
  BOOST_TEST(dev.mallocs == 3);
  BOOST_TEST(alloc.allocate(0, 4096, kA) == p);  // still cached for A on device 0
}

BOOST_AUTO_TEST_CASE(stream_allocator_reuses_a_block_used_on_another_stream_only_after_its_event) {
  FakeDevice dev;
  StreamAllocator alloc(dev, mg::DeviceType::cuda);
  void* p = alloc.allocate(0, 4096, kA);
  alloc.record_stream(p, kB);
  dev.enqueue(kB);  // a kernel on B reads p
  alloc.release(p);
  BOOST_TEST(dev.records == 1);
  void* q = alloc.allocate(0, 4096, kA);  // B has not finished: p is not free yet
  BOOST_TEST(q != p);
  dev.finish(kB);
  void* r = alloc.allocate(0, 4096, kA);  // the event completed: p is back on A
  BOOST_TEST(r == p);
  BOOST_TEST(dev.mallocs == 2);
  // The event went back to the pool and is used again, not created anew.
  alloc.record_stream(r, kB);
  alloc.release(r);
  BOOST_TEST(dev.events_created == 1);
  BOOST_TEST(dev.records == 2);
}

BOOST_AUTO_TEST_CASE(stream_allocator_waits_for_every_stream_a_block_was_used_on) {
  FakeDevice dev;
  StreamAllocator alloc(dev, mg::DeviceType::cuda);
  void* p = alloc.allocate(0, 2048, kA);
  alloc.record_stream(p, kB);
  alloc.record_stream(p, kC);
  alloc.record_stream(p, kB);  // once per stream
  alloc.record_stream(p, kA);  // its own stream: nothing to wait for
  dev.enqueue(kB);
  dev.enqueue(kC);
  alloc.release(p);
  BOOST_TEST(dev.records == 2);
  dev.finish(kB);
  void* q = alloc.allocate(0, 2048, kA);
  BOOST_TEST(q != p);  // C still reads it
  dev.finish(kC);
  BOOST_TEST(alloc.allocate(0, 2048, kA) == p);
}

BOOST_AUTO_TEST_CASE(stream_allocator_forgets_other_streams_once_a_block_is_reused) {
  FakeDevice dev;
  StreamAllocator alloc(dev, mg::DeviceType::cuda);
  void* p = alloc.allocate(0, 512, kA);
  alloc.record_stream(p, kB);
  alloc.release(p);
  dev.finish(kB);
  BOOST_TEST(alloc.allocate(0, 512, kA) == p);
  alloc.release(p);  // this use was on A only
  BOOST_TEST(dev.records == 1);
  BOOST_TEST(alloc.allocate(0, 512, kA) == p);
}

BOOST_AUTO_TEST_CASE(stream_allocator_rejects_record_stream_of_an_unknown_block_and_ignores_unknown_frees) {
  FakeDevice dev;
  StreamAllocator alloc(dev, mg::DeviceType::cuda);
  int local = 0;
  BOOST_CHECK_THROW(alloc.record_stream(&local, kB), mg::ValueError);
  alloc.release(&local);  // not ours: nothing happens
  void* p = alloc.allocate(0, 512, kA);
  alloc.release(p);
  alloc.release(p);  // a second free must not cache the block twice
  void* a = alloc.allocate(0, 512, kA);
  void* b = alloc.allocate(0, 512, kA);
  BOOST_TEST(a != b);
  BOOST_CHECK_THROW(alloc.allocate(0, -1, kA), mg::ShapeError);
}

BOOST_AUTO_TEST_CASE(stream_allocator_empties_the_cache_and_retries_once_when_the_device_is_full) {
  FakeDevice dev(8192);
  StreamAllocator alloc(dev, mg::DeviceType::cuda);
  void* small = alloc.allocate(0, 4096, kA);
  alloc.release(small);  // cached: 4096 of 8192 still reserved
  void* big = alloc.allocate(0, 6000, kA);  // class 6144: fits only after the cache is given back
  BOOST_TEST(big != nullptr);
  BOOST_TEST(dev.frees == 1);
  BOOST_TEST(dev.mallocs == 3);  // the first block, the failed try, the retry
  const auto s = alloc.stats(0);
  BOOST_TEST(s.oom_retries == 1);
  BOOST_TEST(s.reserved == 6144);
  BOOST_TEST(s.allocated == 6144);
}

BOOST_AUTO_TEST_CASE(stream_allocator_waits_for_pending_events_before_giving_up) {
  FakeDevice dev(8192);
  StreamAllocator alloc(dev, mg::DeviceType::cuda);
  void* p = alloc.allocate(0, 8192, kA);
  alloc.record_stream(p, kB);
  dev.enqueue(kB);
  alloc.release(p);  // waits on B's event
  void* q = alloc.allocate(0, 4096, kA);  // full: wait for B, free p, retry
  BOOST_TEST(q != nullptr);
  BOOST_TEST(dev.syncs == 1);
  BOOST_TEST(dev.frees == 1);
}

BOOST_AUTO_TEST_CASE(stream_allocator_out_of_memory_names_the_device_and_sizes_and_changes_nothing) {
  FakeDevice dev(8192);
  StreamAllocator alloc(dev, mg::DeviceType::cuda);
  void* held = alloc.allocate(1, 6000, kA);
  const auto before = alloc.stats(1);
  BOOST_CHECK_EXCEPTION(alloc.allocate(1, 4000, kA), mg::OutOfMemoryError, [](const mg::OutOfMemoryError& e) {
    const std::string m = e.what();
    return m.find("cuda:1") != std::string::npos && m.find("4000 bytes") != std::string::npos &&
           m.find("6144 bytes allocated") != std::string::npos;
  });
  const auto after = alloc.stats(1);
  BOOST_TEST(after.allocated == before.allocated);
  BOOST_TEST(after.reserved == before.reserved);
  BOOST_TEST(after.oom_retries == 1);
  alloc.release(held);  // the allocator still works
  BOOST_TEST(alloc.allocate(1, 6000, kA) == held);
}

BOOST_AUTO_TEST_CASE(stream_allocator_counts_allocated_reserved_and_peak_bytes) {
  FakeDevice dev;
  StreamAllocator alloc(dev, mg::DeviceType::cuda);
  void* a = alloc.allocate(0, 1000, kA);   // 1024
  void* b = alloc.allocate(0, 3000, kA);   // 3072
  auto s = alloc.stats(0);
  BOOST_TEST(s.allocated == 4096);
  BOOST_TEST(s.reserved == 4096);
  BOOST_TEST(s.peak_allocated == 4096);
  BOOST_TEST(s.device_mallocs == 2);
  alloc.release(b);
  s = alloc.stats(0);
  BOOST_TEST(s.allocated == 1024);
  BOOST_TEST(s.reserved == 4096);  // cached, still held from the device
  BOOST_TEST(s.peak_allocated == 4096);
  alloc.reset_peak(0);
  BOOST_TEST(alloc.stats(0).peak_allocated == 1024);
  alloc.release(a);
  BOOST_TEST(alloc.stats(0).allocated == 0);
  BOOST_TEST(alloc.stats(7).reserved == 0);  // a device never used
}

BOOST_AUTO_TEST_CASE(stream_allocator_empty_cache_gives_every_cached_block_back) {
  FakeDevice dev;
  {
    StreamAllocator alloc(dev, mg::DeviceType::cuda);
    void* kept = alloc.allocate(0, 512, kA);
    void* cached = alloc.allocate(0, 2048, kA);
    void* pending = alloc.allocate(1, 4096, kA);
    alloc.record_stream(pending, kB);
    dev.enqueue(kB);
    alloc.release(cached);
    alloc.release(pending);
    alloc.empty_cache();
    BOOST_TEST(dev.syncs == 1);  // the pending block was waited for, then freed
    BOOST_TEST(dev.used(0) == 512);
    BOOST_TEST(dev.used(1) == 0);
    BOOST_TEST(alloc.stats(0).reserved == 512);
    BOOST_TEST(alloc.stats(1).reserved == 0);
    alloc.release(kept);
  }
  // The destructor gave back the rest, and its events.
  BOOST_TEST(dev.used(0) == 0);
  BOOST_TEST(dev.live_events() == 0u);
}
