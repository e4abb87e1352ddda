// The rules of mg::cuda::CapturedStep as host logic, without a GPU: the
// capture guard of the host-synchronisation counter (backend/host_sync.hpp),
// the capture state machine over a mocked graph device whose warm-ups,
// captures and launches the test records (backend/step_capture.hpp), and
// the capture-private memory pools over a fake device (backend/capture_pool.hpp).
// Built in every build (tests/meson.build, test_cuda_host).
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/capture_pool.hpp"
#include "backend/host_sync.hpp"
#include "backend/pending_checks.hpp"
#include "backend/step_capture.hpp"
#include "core/stream_allocator.hpp"
#include "mixgrad/cuda.hpp"
#include "mixgrad/error.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "mixgrad/tensor.hpp"
#include "mixgrad/train/captured_step.hpp"

namespace mg = mixgrad;
namespace be = mixgrad::backend;

namespace {

// What the mocked device was asked to do, kept outside it so the test can
// read it after the StepCapture (which owns the device) is gone.
struct DeviceLog {
  int warmups = 0, begins = 0, ends = 0, aborts = 0, launches = 0, releases = 0;
  std::vector<std::vector<float>> launched_with;  // the static input's values at each launch
  const mg::Tensor* watched = nullptr;
  std::function<void()> on_launch;  // what the graph's kernels would do at a replay
};

class MockGraphDevice : public be::GraphDevice {
 public:
  explicit MockGraphDevice(DeviceLog& log) : log_(log) {}
  void warm_up(const std::function<void()>& step) override {
    ++log_.warmups;
    step();
  }
  void begin_capture() override { ++log_.begins; }
  void end_capture() override { ++log_.ends; }
  void abort_capture() noexcept override { ++log_.aborts; }
  void launch() override {
    ++log_.launches;
    if (log_.watched) log_.launched_with.push_back(log_.watched->to_vector<float>());
    if (log_.on_launch) log_.on_launch();
  }
  void release() noexcept override { ++log_.releases; }

 private:
  DeviceLog& log_;
};

// Host memory as a device, with the counts the pool rules are read from.
class FakeDevice : public mg::core::DeviceMemoryApi {
 public:
  ~FakeDevice() override {
    for (auto& [p, n] : live) std::free(p);
  }
  void* malloc(int, size_t bytes) override {
    void* p = std::malloc(bytes);
    live[p] = bytes;
    return p;
  }
  void free(int, void* p) noexcept override {
    ++frees;
    live.erase(p);
    std::free(p);
  }
  mg::core::EventHandle create_event(int) override { return new int(0); }
  void destroy_event(int, mg::core::EventHandle e) noexcept override { delete static_cast<int*>(e); }
  void record_event(int, mg::core::EventHandle, mg::core::StreamId) override {}
  bool query_event(int, mg::core::EventHandle) override { return true; }
  void synchronize_event(int, mg::core::EventHandle) override {}

  std::map<void*, size_t> live;
  int frees = 0;
};

constexpr mg::core::StreamId kMain = 0, kCapture = 7;

// The capture pools over a fake device and its shared cache.
struct Pools {
  FakeDevice dev;
  mg::core::StreamAllocator shared{dev, mg::DeviceType::cuda};
  be::CapturePools pools{dev, shared};
};

std::unique_ptr<be::StepCapture> make_capture(DeviceLog& log, std::function<void()> step, const mg::Tensor& x,
                                              int warmups = 2) {
  return std::make_unique<be::StepCapture>(std::make_unique<MockGraphDevice>(log), std::move(step),
                                           std::vector<be::StaticInput>{{"x", x}},
                                           be::StepCapture::Options{.warmup_steps = warmups});
}

bool message_has(const mg::Error& e, const std::string& a, const std::string& b = "") {
  const std::string m = e.what();
  return m.find(a) != std::string::npos && m.find(b) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(capture_rules)

// Outside a capture the test drives the counter; inside, the same call is a
// StateError naming the op and the capture, and the count does not move.
BOOST_AUTO_TEST_CASE(a_sync_inside_a_capture_region_is_refused_by_name_and_not_counted) {
  const int64_t before = be::host_sync_count();
  be::note_host_sync("test sync");
  BOOST_TEST(be::host_sync_count() == before + 1);
  BOOST_TEST(be::capturing() == nullptr);
  {
    be::CaptureRegion region("CapturedStep");
    BOOST_TEST(std::string(be::capturing()) == "CapturedStep");
    BOOST_CHECK_EXCEPTION(be::note_host_sync("Tensor::item"), mg::StateError,
                          [](const mg::StateError& e) { return message_has(e, "Tensor::item", "CapturedStep"); });
    BOOST_TEST(be::host_sync_count() == before + 1);
    BOOST_TEST(region.refused() == "Tensor::item");
    BOOST_CHECK_EXCEPTION(be::check_not_capturing("dropout", "its counters are host values"), mg::StateError,
                          [](const mg::StateError& e) { return message_has(e, "dropout", "host values"); });
    BOOST_TEST(region.refused() == "Tensor::item");  // the first refusal is kept
    BOOST_CHECK_THROW(be::CaptureRegion("another"), mg::StateError);  // no nesting
    BOOST_TEST(std::string(be::capturing()) == "CapturedStep");
  }
  BOOST_TEST(be::capturing() == nullptr);
  be::check_not_capturing("dropout", "unused");  // outside: nothing
  be::note_host_sync("test sync");
  BOOST_TEST(be::host_sync_count() == before + 2);
}

// The flag is per thread, as cudaStreamCaptureModeThreadLocal: another
// thread may synchronise while one captures.
BOOST_AUTO_TEST_CASE(another_thread_may_sync_while_one_captures) {
  be::CaptureRegion region("CapturedStep");
  bool other_threw = true;
  std::thread t([&] {
    try {
      be::note_host_sync("data loader copy");
      other_threw = false;
    } catch (const mg::StateError&) {
    }
  });
  t.join();
  BOOST_TEST(!other_threw);
  BOOST_TEST(region.refused().empty());
}

BOOST_AUTO_TEST_CASE(warm_up_then_one_capture_then_replays) {
  DeviceLog log;
  int ran = 0;
  const mg::Tensor x = mg::zeros({2, 3});
  auto cap = make_capture(log, [&] { ++ran; }, x, 3);
  BOOST_TEST(ran == 0);  // the constructor runs nothing
  cap->capture();
  BOOST_TEST(ran == 4);  // 3 warm-ups and the capture
  BOOST_TEST(log.warmups == 3);
  BOOST_TEST(cap->warmups() == 3);
  BOOST_TEST(log.begins == 1);
  BOOST_TEST(log.ends == 1);
  BOOST_TEST(log.aborts == 0);
  BOOST_TEST((cap->state() == be::StepCapture::State::captured));
  BOOST_CHECK_THROW(cap->capture(), mg::StateError);  // once
  BOOST_TEST(log.begins == 1);
  BOOST_TEST(ran == 4);
}

// The capture's sync names the op; the capture is aborted and the object is
// as before: not captured, no replay, and it may try again.
BOOST_AUTO_TEST_CASE(a_step_that_syncs_fails_the_capture_by_name_and_changes_nothing) {
  DeviceLog log;
  bool sync = true;
  int ran = 0;
  const mg::Tensor x = mg::zeros({4});
  auto cap = make_capture(log, [&] {
    ++ran;
    if (sync && be::capturing()) be::note_host_sync("Tensor::item");
  }, x, 1);
  const int64_t syncs = be::host_sync_count();
  BOOST_CHECK_EXCEPTION(cap->capture(), mg::StateError,
                        [](const mg::StateError& e) { return message_has(e, "Tensor::item", "CapturedStep"); });
  BOOST_TEST(be::host_sync_count() == syncs);
  BOOST_TEST(be::capturing() == nullptr);
  BOOST_TEST(log.begins == 1);
  BOOST_TEST(log.aborts == 1);
  BOOST_TEST(log.ends == 0);
  BOOST_TEST((cap->state() == be::StepCapture::State::warm));
  BOOST_CHECK_THROW(cap->replay({mg::ones({4})}), mg::StateError);
  BOOST_TEST(log.launches == 0);
  BOOST_TEST(cap->replays() == 0);
  BOOST_TEST(x.to_vector<float>() == std::vector<float>(4, 0.0f));  // the refused replay copied nothing
  sync = false;
  cap->capture();
  BOOST_TEST((cap->state() == be::StepCapture::State::captured));
  BOOST_TEST(log.ends == 1);
}

// A step that catches the refusal and goes on would leave a graph without
// the sync's effect: the capture still fails, naming the op.
BOOST_AUTO_TEST_CASE(a_step_that_swallows_the_refusal_still_fails_the_capture) {
  DeviceLog log;
  const mg::Tensor x = mg::zeros({1});
  auto cap = make_capture(log, [&] {
    try {
      be::check_not_capturing("transfer (a copy from the host)", "frozen");
    } catch (const mg::StateError&) {
    }
  }, x, 1);
  BOOST_CHECK_EXCEPTION(cap->capture(), mg::StateError, [](const mg::StateError& e) {
    return message_has(e, "transfer (a copy from the host)", "caught");
  });
  BOOST_TEST(log.aborts == 1);
  BOOST_TEST((cap->state() == be::StepCapture::State::warm));
}

BOOST_AUTO_TEST_CASE(an_exception_of_the_step_aborts_the_capture) {
  DeviceLog log;
  const mg::Tensor x = mg::zeros({1});
  auto cap = make_capture(log, [&] {
    if (be::capturing()) throw mg::ValueError("bad label");
  }, x, 1);
  BOOST_CHECK_THROW(cap->capture(), mg::ValueError);
  BOOST_TEST(log.aborts == 1);
  BOOST_TEST(be::capturing() == nullptr);
}

// Each replay copies the new data into the static input before the launch.
BOOST_AUTO_TEST_CASE(replays_copy_into_the_static_inputs_then_launch_and_are_counted) {
  DeviceLog log;
  const mg::Tensor x = mg::zeros({3});
  log.watched = &x;
  auto cap = make_capture(log, [] {}, x);
  cap->capture();
  for (int i = 1; i <= 5; ++i) cap->replay({mg::full({3}, static_cast<double>(i))});
  BOOST_TEST(cap->replays() == 5);
  BOOST_TEST(log.launches == 5);
  BOOST_TEST(log.launched_with.size() == 5u);
  for (size_t i = 0; i < log.launched_with.size(); ++i)
    BOOST_TEST(log.launched_with[i] == std::vector<float>(3, static_cast<float>(i + 1)));
  cap->replay({x});  // the static input itself: no copy, one more launch
  BOOST_TEST(cap->replays() == 6);
  BOOST_TEST(log.launched_with.back() == std::vector<float>(3, 5.0f));
}

// Another shape, dtype or count: a typed error naming the input, nothing
// copied, nothing launched, the count unchanged.
BOOST_AUTO_TEST_CASE(a_replay_with_another_shape_or_dtype_is_refused_by_name) {
  DeviceLog log;
  const mg::Tensor x = mg::full({2, 3}, 7.0, mg::DType::float32);
  auto cap = make_capture(log, [] {}, x);
  cap->capture();
  BOOST_CHECK_EXCEPTION(cap->replay({mg::ones({3, 2})}), mg::ShapeError, [](const mg::ShapeError& e) {
    return message_has(e, "CapturedStep::replay: input 'x'", "[2, 3]");
  });
  BOOST_CHECK_EXCEPTION(cap->replay({mg::ones({2, 3}, mg::DType::float64)}), mg::DTypeError,
                        [](const mg::DTypeError& e) { return message_has(e, "input 'x'", "float64"); });
  BOOST_CHECK_THROW(cap->replay({}), mg::ValueError);
  BOOST_CHECK_THROW(cap->replay({mg::ones({2, 3}), mg::ones({2, 3})}), mg::ValueError);
  BOOST_CHECK_THROW(cap->replay({mg::Tensor()}), mg::ValueError);
  BOOST_TEST(log.launches == 0);
  BOOST_TEST(cap->replays() == 0);
  BOOST_TEST(x.to_vector<float>() == std::vector<float>(6, 7.0f));
}

// The graph lives as long as the object: released once, at its end, also
// after a failed capture.
BOOST_AUTO_TEST_CASE(the_graph_is_released_once_when_the_capture_is_destroyed) {
  DeviceLog log;
  {
    auto cap = make_capture(log, [] {}, mg::zeros({1}));
    cap->capture();
    cap->replay({mg::ones({1})});
    BOOST_TEST(log.releases == 0);
  }
  BOOST_TEST(log.releases == 1);
  DeviceLog failed;
  {
    auto cap = make_capture(failed, [] { be::note_host_sync("cuda::synchronize"); }, mg::zeros({1}), 1);
    BOOST_CHECK_THROW(cap->capture(), mg::StateError);  // the warm-up's sync counts; the capture's is refused
    BOOST_TEST(failed.releases == 0);
  }
  BOOST_TEST(failed.releases == 1);
}

BOOST_AUTO_TEST_CASE(bad_construction_is_refused_before_anything_runs) {
  DeviceLog log;
  int ran = 0;
  auto step = [&] { ++ran; };
  BOOST_CHECK_THROW(make_capture(log, step, mg::zeros({1}), 0), mg::ValueError);
  BOOST_CHECK_THROW(make_capture(log, step, mg::Tensor()), mg::ValueError);
  BOOST_CHECK_THROW(make_capture(log, step, mg::F::transpose(mg::zeros({2, 3}), 0, 1)), mg::ValueError);
  BOOST_CHECK_THROW(make_capture(log, {}, mg::zeros({1})), mg::ValueError);
  BOOST_CHECK_THROW(be::StepCapture(nullptr, step, {}, {}), mg::ValueError);
  BOOST_TEST(ran == 0);
  BOOST_TEST(log.warmups == 0);
}

// The public class needs a CUDA device: CPU inputs, or no CUDA, are a
// DeviceError before the step runs.
BOOST_AUTO_TEST_CASE(captured_step_without_a_cuda_device_is_a_device_error) {
  int ran = 0;
  BOOST_CHECK_EXCEPTION(mg::cuda::CapturedStep([&] { ++ran; }, {{"x", mg::zeros({2})}}), mg::DeviceError,
                        [](const mg::DeviceError& e) { return message_has(e, "input 'x'", "cpu"); });
  BOOST_CHECK_THROW(mg::cuda::CapturedStep([&] { ++ran; }, {}), mg::DeviceError);
  if (!mg::cuda::is_available()) {
    BOOST_CHECK_THROW(mg::cuda::CapturedStep([&] { ++ran; }, {}, {.warmup_steps = 1, .device = 0}), mg::DeviceError);
  }
  BOOST_TEST(ran == 0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(capture_pools)

// Without a pool, and on a thread that does not capture, allocations are the
// shared allocator's; while a thread captures, its allocations come from the pool.
BOOST_FIXTURE_TEST_CASE(allocations_during_a_capture_come_from_its_pool, Pools) {
  void* a = pools.allocate(0, 4096, kMain);
  BOOST_TEST(shared.stats(0).allocated == 4096);
  const auto id = pools.create_pool();
  BOOST_TEST(pools.pools_alive() == 1);
  void* b = pools.allocate(0, 4096, kMain);  // not routed: shared
  BOOST_TEST(!pools.in_pool(b));
  pools.begin(id);
  void* c = pools.allocate(0, 4096, kCapture);
  void* other = nullptr;
  std::thread t([&] { other = pools.allocate(0, 4096, kMain); });  // another thread: shared
  t.join();
  pools.end();
  BOOST_TEST(pools.in_pool(c));
  BOOST_TEST(!pools.in_pool(other));
  BOOST_TEST(shared.stats(0).allocated == 3 * 4096);
  BOOST_TEST(pools.stats(id, 0).live_blocks == 1);
  for (void* p : {a, b, c, other}) pools.release(p);
  pools.destroy_pool(id);
}

// A pool block freed, during the capture or after it, is reused only by the
// capture itself, never by an allocation outside it.
BOOST_FIXTURE_TEST_CASE(a_pool_block_is_never_reused_outside_the_capture, Pools) {
  const auto id = pools.create_pool();
  pools.begin(id);
  void* tmp = pools.allocate(0, 8192, kCapture);
  pools.release(tmp);                                    // a temporary of the step
  void* again = pools.allocate(0, 8192, kCapture);       // the capture may reuse it: the graph orders both
  BOOST_TEST(again == tmp);
  void* freed_in_capture = pools.allocate(0, 1024, kCapture);
  pools.release(freed_in_capture);
  void* kept = pools.allocate(0, 2048, kCapture);        // e.g. a gradient that outlives the capture
  pools.end();
  pools.release(kept);                                   // freed after the capture
  BOOST_TEST(pools.stats(id, 0).cached_bytes == 1024 + 2048);
  for (mg::core::StreamId s : {kMain, kCapture}) {
    void* x = pools.allocate(0, 1024, s);
    void* y = pools.allocate(0, 2048, s);
    BOOST_TEST(x != freed_in_capture);
    BOOST_TEST(y != kept);
    BOOST_TEST(!pools.in_pool(x));
    pools.release(x);
    pools.release(y);
  }
  pools.release(again);
  pools.destroy_pool(id);
  BOOST_TEST(pools.pools_alive() == 0);
  BOOST_TEST(dev.live.count(tmp) == 0);  // the pool's memory went back to the device
  BOOST_TEST(dev.live.count(kept) == 0);
}

// A shared block freed during the capture (an input of the captured work)
// is held until the pool is destroyed, then cached again.
BOOST_FIXTURE_TEST_CASE(a_shared_block_freed_during_the_capture_is_held_until_the_pool_dies, Pools) {
  void* input = pools.allocate(0, 4096, kMain);
  const auto id = pools.create_pool();
  pools.begin(id);
  pools.release(input);
  pools.end();
  BOOST_TEST(pools.stats(id, 0).held_shared == 1);
  void* next = pools.allocate(0, 4096, kMain);
  BOOST_TEST(next != input);
  pools.destroy_pool(id);
  void* after = pools.allocate(0, 4096, kMain);
  BOOST_TEST(after == input);  // back in the shared cache
  pools.release(next);
  pools.release(after);
}

// A retired pool stays until its last live block is freed, which then goes
// to the device; a pool cannot be destroyed while a thread routes to it.
BOOST_FIXTURE_TEST_CASE(a_pool_outlives_its_capture_while_its_blocks_live, Pools) {
  const auto id = pools.create_pool();
  pools.begin(id);
  BOOST_CHECK_THROW(pools.begin(id), mg::StateError);
  void* grad = pools.allocate(0, 4096, kCapture);
  BOOST_CHECK_THROW(pools.destroy_pool(id), mg::StateError);
  BOOST_TEST(!pools.stats(id, 0).retired);  // the refused call changed nothing
  pools.end();
  pools.destroy_pool(id);
  BOOST_TEST(pools.stats(id, 0).retired);
  BOOST_TEST(pools.pools_alive() == 1);
  BOOST_TEST(dev.live.count(grad) == 1);
  BOOST_CHECK_THROW(pools.begin(id), mg::StateError);
  pools.release(grad);
  BOOST_TEST(dev.live.count(grad) == 0);
  BOOST_TEST(pools.pools_alive() == 0);
  BOOST_CHECK_THROW(pools.stats(id, 0), mg::ValueError);
}

// A status check deferred by a captured op (a class loss's label check) is
// not run at the capture, whose kernels have not run, but after every
// replay, on what that replay's kernels wrote: a bad label in the third
// replayed batch is reported there. A failed capture's checks are dropped.
BOOST_AUTO_TEST_CASE(status_checks_of_captured_ops_run_after_every_replay) {
  DeviceLog log;
  const mg::Tensor x = mg::zeros({1});
  mg::Tensor status = mg::full({2}, -1.0, mg::DType::int64);  // as a kernel's status
  int checked = 0;
  bool fail_capture = false;
  auto cap = make_capture(log, [&] {
    if (!be::capturing()) return;
    be::defer_status_check(status, [&checked](const int64_t* st) {
      ++checked;
      if (st[0] >= 0) throw mg::ValueError("cross_entropy: label out of range at " + std::to_string(st[0]));
    });
    if (fail_capture) throw mg::ValueError("the step failed");
  }, x, 1);
  fail_capture = true;
  BOOST_CHECK_THROW(cap->capture(), mg::ValueError);
  BOOST_TEST(be::take_captured_checks().empty());  // dropped with the capture
  fail_capture = false;
  cap->capture();
  BOOST_TEST(checked == 0);  // nothing ran yet: the status is the replays' to write
  int replay = 0;
  log.on_launch = [&] {
    ++replay;
    status.data<int64_t>()[0] = replay == 3 ? 5 : -1;  // the third batch has a bad label
  };
  cap->replay({x});
  cap->replay({x});
  BOOST_TEST(checked == 2);
  BOOST_CHECK_EXCEPTION(cap->replay({x}), mg::ValueError,
                        [](const mg::ValueError& e) { return message_has(e, "label out of range at 5"); });
  BOOST_TEST(checked == 3);
  cap->replay({x});  // the next batch is fine again
  BOOST_TEST(checked == 4);
}

BOOST_AUTO_TEST_SUITE_END()
