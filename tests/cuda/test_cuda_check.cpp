// The CUDA status check (src/backend/cuda/check.hpp): built only with the
// CUDA backend, runs without a device (it never reaches the driver).
#include <boost/test/unit_test.hpp>

#include <string>

#include "backend/cuda/check.hpp"
#include "mixgrad/error.hpp"

namespace {

int g_calls = 0;
cudaError_t failing_call(int bytes) {
  ++g_calls;
  return bytes > 0 ? cudaErrorMemoryAllocation : cudaSuccess;
}

}  // namespace

BOOST_AUTO_TEST_CASE(cuda_check_throws_device_error_naming_call_file_and_line) {
  g_calls = 0;
  const int line = __LINE__ + 2;
  try {
    MIXGRAD_CUDA_CHECK(failing_call(64));
    BOOST_FAIL("no exception");
  } catch (const mixgrad::DeviceError& e) {
    const std::string m = e.what();
    BOOST_TEST(m.find("cudaErrorMemoryAllocation") != std::string::npos, m);
    BOOST_TEST(m.find("failing_call(64)") != std::string::npos, m);
    BOOST_TEST(m.find("test_cuda_check.cpp:" + std::to_string(line)) != std::string::npos, m);
  }
  BOOST_TEST(g_calls == 1);  // the call is evaluated once
}

BOOST_AUTO_TEST_CASE(cuda_check_passes_success_through) {
  g_calls = 0;
  BOOST_CHECK_NO_THROW(MIXGRAD_CUDA_CHECK(failing_call(0)));
  BOOST_TEST(g_calls == 1);
}
