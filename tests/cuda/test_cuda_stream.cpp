// Streams and events of the CUDA backend (src/backend/cuda/stream.hpp) on the
// host: built only with the CUDA backend; nothing here needs a device.
#include <boost/test/unit_test.hpp>

#include <thread>

#include "backend/cuda/stream.hpp"
#include "mixgrad/cuda.hpp"
#include "mixgrad/error.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/tensor.hpp"

namespace mg = mixgrad;
namespace cu = mixgrad::backend::cuda;

namespace {
// Stream handles are only stored and compared here, never used.
cudaStream_t fake_stream(uintptr_t n) { return reinterpret_cast<cudaStream_t>(n); }
}  // namespace

BOOST_AUTO_TEST_CASE(current_stream_is_the_legacy_default_until_a_guard_sets_one) {
  BOOST_TEST(cu::current_stream(0) == nullptr);
  BOOST_TEST(cu::current_stream(3) == nullptr);
  {
    cu::StreamGuard outer(0, fake_stream(0x100));
    BOOST_TEST(cu::current_stream(0) == fake_stream(0x100));
    BOOST_TEST(cu::current_stream(1) == nullptr);  // per device
    {
      cu::StreamGuard inner(0, fake_stream(0x200));
      BOOST_TEST(cu::current_stream(0) == fake_stream(0x200));
    }
    BOOST_TEST(cu::current_stream(0) == fake_stream(0x100));  // nested guards restore in order
  }
  BOOST_TEST(cu::current_stream(0) == nullptr);
}

BOOST_AUTO_TEST_CASE(current_stream_is_per_thread) {
  cu::StreamGuard here(0, fake_stream(0x300));
  cudaStream_t seen_there = fake_stream(1);
  std::thread([&] { seen_there = cu::current_stream(0); }).join();
  BOOST_TEST(seen_there == nullptr);
  BOOST_TEST(cu::current_stream(0) == fake_stream(0x300));
}

BOOST_AUTO_TEST_CASE(stream_indices_out_of_range_are_device_errors) {
  BOOST_CHECK_THROW(cu::current_stream(-1), mg::DeviceError);
  BOOST_CHECK_THROW(cu::current_stream(cu::kMaxDevices), mg::DeviceError);
  BOOST_CHECK_THROW(cu::set_current_stream(cu::kMaxDevices, nullptr), mg::DeviceError);
  BOOST_CHECK_THROW(cu::StreamGuard(-2, nullptr), mg::DeviceError);
}

BOOST_AUTO_TEST_CASE(an_event_never_recorded_is_complete_and_needs_no_device) {
  cu::Event e;
  BOOST_TEST(!e.recorded());
  BOOST_TEST(e.query());
  BOOST_CHECK_NO_THROW(e.synchronize());
  BOOST_CHECK_NO_THROW(e.wait(nullptr));
  cu::Event end(true);
  BOOST_CHECK_THROW(e.elapsed_ms(end), mg::DeviceError);
}

BOOST_AUTO_TEST_CASE(without_a_device_streams_and_record_stream_are_device_errors) {
  if (mg::cuda::device_count() > 0) return;  // the device suite covers them there
  BOOST_CHECK_THROW(cu::Stream(0), mg::DeviceError);
  BOOST_CHECK_THROW(cu::record_stream(mg::zeros({2}), nullptr), mg::DeviceError);  // a CPU tensor
}
