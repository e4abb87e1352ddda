// Device tests of host <-> device transfers: device-to-host copies of up to
// kMaxStagedBytes go through the pinned staging pool (one host wait each,
// the pool reused, not grown), larger ones through the runtime's pageable
// path; every size and dtype arrives bit for bit. Part of test_cuda_device
// (exits 77 without a device).
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cuda/pinned.hpp"
#include "backend/host_sync.hpp"
#include "mixgrad/cuda.hpp"
#include "mixgrad/mixgrad.hpp"
#include "device_test_support.hpp"

namespace mg = mixgrad;

using namespace device_test;

BOOST_AUTO_TEST_SUITE(cuda_device_transfer)

BOOST_AUTO_TEST_CASE(device_to_host_copies_arrive_bit_for_bit_at_every_size) {
  const int64_t staged_floats = static_cast<int64_t>(mg::backend::cuda::kMaxStagedBytes / 4);
  // Empty, one element, odd byte counts, a power of two, the largest staged
  // copy, and one element over it (the pageable path).
  const std::vector<std::pair<int64_t, mg::DType>> cases = {
      {0, mg::DType::float32},          {1, mg::DType::float32},      {3, mg::DType::float16},
      {1001, mg::DType::bfloat16},      {1 << 20, mg::DType::float32}, {staged_floats, mg::DType::float32},
      {staged_floats + 1, mg::DType::float32}};
  for (const auto& c : cases) {
    const mg::Tensor host = mg::uniform({c.first}, -3.0, 3.0).to(c.second);
    const mg::Tensor back = host.to(kGpu).to(kCpu);
    BOOST_TEST(back.device() == kCpu);
    BOOST_TEST(back.dtype() == c.second);
    BOOST_TEST((bytes_of(back) == bytes_of(host)), c.first << " elements of " << mg::to_string(c.second));
  }
}

BOOST_AUTO_TEST_CASE(a_staged_device_to_host_copy_waits_once_and_reuses_the_pool) {
  const mg::Tensor gpu = mg::uniform({257, 1031}).to(kGpu);  // ~1 MiB
  const std::vector<float> want = gpu.to(kCpu).to_vector<float>();  // warms the pool's buffer of this size
  const size_t pool = mg::backend::cuda::staging_pool_bytes(0);
  BOOST_TEST(pool > 0u);
  for (int i = 0; i < 20; ++i) {
    const int64_t before = mg::backend::host_sync_count();
    const mg::Tensor back = gpu.to(kCpu);
    BOOST_TEST(mg::backend::host_sync_count() == before + 1);
    BOOST_TEST(back.to_vector<float>() == want);
  }
  // Each copy hands its buffer back finished: no new buffer was needed.
  BOOST_TEST(mg::backend::cuda::staging_pool_bytes(0) == pool);
}

BOOST_AUTO_TEST_CASE(a_device_to_host_copy_sees_the_kernels_queued_before_it) {
  // A chain of kernels on the current stream, then the copy: it must read
  // their result, not the bytes the buffer held when the copy was queued.
  mg::Tensor x = mg::zeros({1 << 16}, mg::DType::float32, kGpu);
  for (int i = 0; i < 50; ++i) x = x + 1.0;
  const std::vector<float> got = x.to(kCpu).to_vector<float>();
  BOOST_TEST(got == std::vector<float>(1 << 16, 50.f));
}

BOOST_AUTO_TEST_CASE(a_channels_last_tensor_crosses_devices_channels_last_with_its_values) {
  // As PyTorch's .to(device): the memory format travels with the tensor, the
  // bytes in one block; a strided source (a narrowed channels-last tensor)
  // is gathered into the format first.
  const mg::Tensor nchw = mg::uniform({2, 3, 5, 4}, -2.0, 2.0);
  const mg::Tensor host = nchw.contiguous(mg::MemoryFormat::channels_last);
  const mg::Tensor gpu = host.to(kGpu);
  BOOST_TEST(gpu.is_contiguous(mg::MemoryFormat::channels_last));
  BOOST_TEST(!gpu.is_contiguous());
  const mg::Tensor back = gpu.to(kCpu);
  BOOST_TEST(back.is_contiguous(mg::MemoryFormat::channels_last));
  BOOST_TEST(back.contiguous().to_vector<float>() == nchw.to_vector<float>());
  const mg::Tensor part = host.narrow(2, 1, 3);  // not dense in any format
  BOOST_TEST(part.to(kGpu).to(kCpu).contiguous().to_vector<float>() == part.contiguous().to_vector<float>());
}

BOOST_AUTO_TEST_SUITE_END()
