// Device tests of the CUDA backend: each result computed on the GPU is
// compared with the same computation on the CPU. Always compiled; exits 77
// (Meson: skipped) when mixgrad has no CUDA device to use: a build without
// the CUDA backend, no driver, or no GPU.
#define BOOST_TEST_MODULE mixgrad cuda device
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <vector>

#include "backend/copy.hpp"
#include "device_test_support.hpp"
#include "mixgrad/mixgrad.hpp"
#if MIXGRAD_WITH_CUDA
#include <cuda_runtime_api.h>

#include "backend/cuda/check.hpp"
#include "backend/cuda/stream.hpp"
#endif

namespace mg = mixgrad;
using namespace device_test;

BOOST_AUTO_TEST_CASE(round_trip_keeps_every_dtype_bit_exact) {
  for (mg::DType dt : kAllDTypes) {
    BOOST_TEST_CONTEXT("dtype " << dt) {
      const mg::Tensor x = mg::uniform({3, 5}, -4.0, 4.0).to(dt);
      const mg::Tensor g = x.to(kGpu);
      BOOST_TEST(g.device() == kGpu);
      BOOST_TEST(g.dtype() == dt);
      BOOST_TEST(bytes_of(g) == bytes_of(x), boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(strided_views_copy_like_the_cpu) {
  const mg::Tensor x = mg::arange(0.0, 120.0, 1.0).reshape({2, 3, 4, 5});
  const mg::Tensor g = x.to(kGpu);
  const mg::Tensor cpu_view = mg::F::transpose(x.narrow(3, 1, 3), 0, 2);
  const mg::Tensor gpu_view = mg::F::transpose(g.narrow(3, 1, 3), 0, 2);
  BOOST_TEST(bytes_of(gpu_view.contiguous()) == bytes_of(cpu_view.contiguous()), boost::test_tools::per_element());
  BOOST_TEST(bytes_of(gpu_view) == bytes_of(cpu_view), boost::test_tools::per_element());  // to() of a view
}

BOOST_AUTO_TEST_CASE(conversions_round_like_the_cpu) {
  const mg::Tensor x = mg::normal({257}, 0.0, 1000.0, mg::DType::float64);
  const mg::Tensor g = x.to(kGpu);
  for (mg::DType from : kAllDTypes) {
    for (mg::DType to : kAllDTypes) {
      BOOST_TEST_CONTEXT(from << " -> " << to) {
        const mg::Tensor cpu = x.to(from).to(to);
        const mg::Tensor gpu = g.to(from).to(to);
        BOOST_TEST(gpu.device() == kGpu);
        BOOST_TEST(bytes_of(gpu) == bytes_of(cpu), boost::test_tools::per_element());
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(fill_and_accumulate_match_the_cpu) {
  for (mg::DType dt : kAllDTypes) {
    BOOST_TEST_CONTEXT("dtype " << dt) {
      BOOST_TEST(bytes_of(mg::full({7, 3}, 2.5, dt, kGpu)) == bytes_of(mg::full({7, 3}, 2.5, dt)),
                 boost::test_tools::per_element());
    }
  }
  for (mg::DType dt : {mg::DType::int64, mg::DType::float32}) {
    const mg::Tensor r = mg::arange(9, dt, kGpu);
    BOOST_TEST(r.device() == kGpu);
    BOOST_TEST(bytes_of(r) == bytes_of(mg::arange(9, dt)), boost::test_tools::per_element());
  }
  // Strided destination and a source of another dtype.
  const mg::Tensor base = mg::uniform({6, 4}, -1.0, 1.0);
  const mg::Tensor src = mg::uniform({3, 4}, -1.0, 1.0, mg::DType::bfloat16);
  const mg::Tensor cpu = base.clone();
  const mg::Tensor gpu = base.to(kGpu);
  mg::backend::accumulate(mg::F::transpose(cpu.narrow(1, 1, 3), 0, 1).narrow(1, 2, 4), src);
  mg::backend::accumulate(mg::F::transpose(gpu.narrow(1, 1, 3), 0, 1).narrow(1, 2, 4), src.to(kGpu));
  BOOST_TEST(bytes_of(gpu) == bytes_of(cpu), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(gradients_flow_back_across_devices) {
  const mg::Tensor x = mg::uniform({2, 3}, -1.0, 1.0);
  mg::autodiff::GradManager gm;
  gm.attach(x);
  {
    auto recording = gm.record();
    const mg::Tensor y = x.to(kGpu).to(mg::DType::float64);
    gm.backward(y, mg::full({2, 3}, 3.0, mg::DType::float64, kGpu));
  }
  BOOST_REQUIRE(x.grad().defined());
  BOOST_TEST(x.grad().device() == kCpu);
  BOOST_TEST(x.grad().dtype() == mg::DType::float32);
  BOOST_TEST(x.grad().to_vector<float>() == std::vector<float>(6, 3.f), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(freed_blocks_are_reused) {
  void* first = nullptr;
  {
    const mg::Tensor a = mg::empty({1000}, mg::DType::float32, kGpu);
    first = a.raw_data();
  }
  const mg::Tensor b = mg::empty({1000}, mg::DType::float32, kGpu);
  BOOST_TEST(b.raw_data() == first);
}

BOOST_AUTO_TEST_CASE(mixed_devices_and_missing_devices_are_errors) {
  const mg::Tensor c = mg::zeros({4});
  const mg::Tensor g = mg::zeros({4}, mg::DType::float32, kGpu);
  BOOST_CHECK_THROW(mg::backend::copy(c, g), mg::DeviceError);
  BOOST_CHECK_THROW(mg::backend::accumulate(c, g), mg::DeviceError);
  BOOST_CHECK_THROW(c.set_grad(g), mg::DeviceError);  // a gradient lives on its tensor's device
  BOOST_TEST(!c.grad().defined());
  BOOST_CHECK_THROW(g.data<float>(), mg::DeviceError);
  BOOST_CHECK_THROW(c.to(mg::Device::cuda(mg::cuda::device_count())), mg::DeviceError);
}

BOOST_AUTO_TEST_CASE(device_out_of_memory_is_out_of_memory_error) {
  // 2^52 bytes: a valid size no device has; cudaMalloc's failure maps to OutOfMemoryError.
  BOOST_CHECK_THROW(mg::empty({int64_t{1} << 50}, mg::DType::float32, kGpu), mg::OutOfMemoryError);
  const mg::Tensor after = mg::ones({4}, mg::DType::float32, kGpu);  // the error is not sticky
  BOOST_TEST(after.to(mg::Device::cpu()).to_vector<float>() == std::vector<float>(4, 1.f),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(runtime_api_sees_the_device) {
  BOOST_TEST(mg::cuda::is_available());
  BOOST_TEST(mg::cuda::device_count() >= 1);
  BOOST_CHECK_NO_THROW(mg::cuda::synchronize());
  BOOST_CHECK_NO_THROW(mg::cuda::synchronize(0));
  BOOST_CHECK_THROW(mg::cuda::synchronize(mg::cuda::device_count()), mg::DeviceError);
}

BOOST_AUTO_TEST_CASE(memory_stats_count_blocks_held_by_tensors) {
  mg::cuda::synchronize(0);
  const auto before = mg::cuda::memory_stats(0);
  mg::cuda::reset_peak_memory_stats(0);
  {
    const mg::Tensor a = mg::empty({1 << 20}, mg::DType::float32, kGpu);  // 4 MiB: its own size class
    const auto during = mg::cuda::memory_stats(0);
    BOOST_TEST(during.allocated == before.allocated + (int64_t{4} << 20));
    BOOST_TEST(during.reserved >= during.allocated);
    BOOST_TEST(during.peak_allocated == during.allocated);
  }
  BOOST_TEST(mg::cuda::memory_stats(0).allocated == before.allocated);
}

#if MIXGRAD_WITH_CUDA
namespace cu = mg::backend::cuda;

BOOST_AUTO_TEST_CASE(work_on_a_side_stream_is_seen_by_host_reads) {
  cu::Stream side(0);
  std::vector<float> seen;
  {
    cu::StreamGuard on(side);
    BOOST_TEST(cu::current_stream(0) == side.get());
    BOOST_TEST(cu::stream() == side.get());  // the current device's (cuda:0 here)
    const mg::Tensor x = mg::full({1 << 22}, 3.0, mg::DType::float32, kGpu);
    const mg::Tensor y = x.to(mg::DType::float16).to(mg::DType::float32);
    seen = y.to(kCpu).to_vector<float>();  // waits for `side`, not for the default stream
  }
  BOOST_TEST(cu::current_stream(0) == nullptr);
  BOOST_TEST(seen.size() == size_t{1} << 22);
  BOOST_TEST(std::all_of(seen.begin(), seen.end(), [](float v) { return v == 3.f; }));
}

BOOST_AUTO_TEST_CASE(a_block_freed_on_one_stream_is_not_served_on_another) {
  cu::Stream side(0);
  void* p = nullptr;
  { p = mg::empty({4096}, mg::DType::float32, kGpu).raw_data(); }
  cu::StreamGuard on(side);
  const mg::Tensor b = mg::empty({4096}, mg::DType::float32, kGpu);
  BOOST_TEST(b.raw_data() != p);
}

BOOST_AUTO_TEST_CASE(record_stream_holds_a_block_until_the_other_stream_passed) {
  cu::Stream side(0);
  void* p = nullptr;
  {
    const mg::Tensor a = mg::zeros({8192}, mg::DType::float32, kGpu);
    p = a.raw_data();
    cu::record_stream(a, side.get());
  }
  side.synchronize();  // the event recorded on `side` at the free has completed
  const mg::Tensor b = mg::empty({8192}, mg::DType::float32, kGpu);
  BOOST_TEST(b.raw_data() == p);
}

BOOST_AUTO_TEST_CASE(events_record_query_synchronize_and_time) {
  cu::Event start(true), stop(true);
  BOOST_TEST(start.query());  // never recorded
  start.record(0, cu::current_stream(0));
  const mg::Tensor x = mg::full({1 << 22}, 1.0, mg::DType::float32, kGpu);
  stop.record(0, cu::current_stream(0));
  stop.synchronize();
  BOOST_TEST(stop.query());
  BOOST_TEST(start.elapsed_ms(stop) >= 0.f);
  cu::Event untimed;
  untimed.record(0, nullptr);
  BOOST_CHECK_THROW(untimed.elapsed_ms(stop), mg::DeviceError);
}

BOOST_AUTO_TEST_CASE(from_blob_wraps_device_memory_and_runs_the_deleter) {
  void* raw = nullptr;
  BOOST_REQUIRE(cudaMalloc(&raw, 6 * sizeof(float)) == cudaSuccess);
  int freed = 0;
  {
    const mg::Tensor t = mg::from_blob(raw, {2, 3}, mg::DType::float32, kGpu, [&](void* q) {
      cudaFree(q);
      ++freed;
    });
    mg::backend::fill(t, 2.5);
    BOOST_TEST(t.to(kCpu).to_vector<float>() == std::vector<float>(6, 2.5f), boost::test_tools::per_element());
  }
  BOOST_TEST(freed == 1);
}
#endif

int main(int argc, char* argv[]) {
  if (!device_available()) return kSkipExitCode;
  return boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
}
