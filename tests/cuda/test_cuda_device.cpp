// Device tests of the CUDA backend: each result computed on the GPU is
// compared with the same computation on the CPU. Always compiled; exits 77
// (Meson: skipped) when mixgrad has no CUDA device to use: a build without
// the CUDA backend, no driver, or no GPU.
#define BOOST_TEST_MODULE mixgrad cuda device
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <cstring>
#include <vector>

#include "backend/copy.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;

namespace {

const mg::Device kGpu = mg::Device::cuda(0);
const mg::Device kCpu = mg::Device::cpu();

// The raw bytes of a CPU tensor, contiguous: comparisons are bitwise.
std::vector<unsigned char> bytes_of(const mg::Tensor& t) {
  const mg::Tensor c = t.to(kCpu).contiguous();
  std::vector<unsigned char> out(static_cast<size_t>(c.numel() * mg::element_size(c.dtype())));
  if (!out.empty()) std::memcpy(out.data(), c.raw_data(), out.size());
  return out;
}

const mg::DType kAllDTypes[] = {mg::DType::float32, mg::DType::float16, mg::DType::bfloat16, mg::DType::float64,
                                mg::DType::int32,   mg::DType::int64,   mg::DType::bool_};

}  // namespace

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
  // Strided destination and a source of another dtype.
  const mg::Tensor base = mg::uniform({6, 4}, -1.0, 1.0);
  const mg::Tensor src = mg::uniform({4, 3}, -1.0, 1.0, mg::DType::bfloat16);
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
  BOOST_CHECK_THROW(c.to(mg::Device::cuda(mg::backend::cuda_device_count())), mg::DeviceError);
}

BOOST_AUTO_TEST_CASE(device_out_of_memory_is_out_of_memory_error) {
  // 2^52 bytes: a valid size no device has; cudaMalloc's failure maps to OutOfMemoryError.
  BOOST_CHECK_THROW(mg::empty({int64_t{1} << 50}, mg::DType::float32, kGpu), mg::OutOfMemoryError);
  const mg::Tensor after = mg::ones({4}, mg::DType::float32, kGpu);  // the error is not sticky
  BOOST_TEST(after.to(mg::Device::cpu()).to_vector<float>() == std::vector<float>(4, 1.f),
             boost::test_tools::per_element());
}

int main(int argc, char* argv[]) {
  if (mg::backend::cuda_device_count() == 0) {
    std::printf("no CUDA device available (CUDA backend %s): skipped\n",
                mg::backend::cuda_built() ? "built" : "not built");
    return 77;
  }
  return boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
}
