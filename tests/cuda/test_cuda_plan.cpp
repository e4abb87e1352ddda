// Host tests of the CUDA backend's pure plan logic (src/backend/cuda/plan.hpp)
// and of how a build without a usable device answers CUDA requests. Runs on
// every machine: nothing here needs a GPU.
#define BOOST_TEST_MODULE mixgrad cuda plan
#include <boost/test/unit_test.hpp>

#include <vector>

#include "backend/copy.hpp"
#include "backend/cuda/plan.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace plan = mixgrad::backend::cuda_plan;

namespace {

// Byte offsets of every element in row-major order, by the definition:
// offset = sum(index[d] * byte_stride[d]), the multi-index counted out by hand.
std::vector<int64_t> reference_offsets(const mg::Tensor& t) {
  const mg::Shape s = t.shape();
  const mg::Shape bs = mg::backend::byte_strides(t);
  std::vector<int64_t> out;
  std::vector<int64_t> idx(static_cast<size_t>(s.ndim()), 0);
  for (int64_t n = 0; n < s.numel(); ++n) {
    int64_t off = 0;
    for (int d = 0; d < s.ndim(); ++d) off += idx[d] * bs[d];
    out.push_back(off);
    for (int d = s.ndim() - 1; d >= 0; --d) {
      if (++idx[d] < s[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

// The offsets the kernels would use: operand 0 is `t`, operand 1 a
// contiguous tensor of the same shape and dtype (the usual copy's output).
void check_indexer(const mg::Tensor& t) {
  BOOST_TEST_CONTEXT("shape " << t.shape() << " strides " << t.strides()) {
    const mg::Tensor dense = mg::empty(t.shape(), t.dtype());
    const auto ix = plan::make_indexer<2>(t.shape(), {mg::backend::byte_strides(t), mg::backend::byte_strides(dense)});
    const std::vector<int64_t> want = reference_offsets(t);
    const std::vector<int64_t> want_dense = reference_offsets(dense);
    for (int64_t i = 0; i < t.numel(); ++i) {
      int64_t off[2];
      ix.offsets(i, off);
      BOOST_TEST_REQUIRE(off[0] == want[i], "element " << i);
      BOOST_TEST_REQUIRE(off[1] == want_dense[i], "element " << i);
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(launch_config_covers_n_with_capped_blocks) {
  constexpr auto none = plan::launch_config(0);
  static_assert(none.blocks == 0 && none.threads == 0, "nothing to launch for n = 0");
  BOOST_TEST(plan::launch_config(-3).blocks == 0u);
  BOOST_TEST(plan::launch_config(1).blocks == 1u);
  BOOST_TEST(plan::launch_config(1).threads == 256u);
  BOOST_TEST(plan::launch_config(256).blocks == 1u);
  BOOST_TEST(plan::launch_config(257).blocks == 2u);
  BOOST_TEST(plan::launch_config(1000, 128).blocks == 8u);
  BOOST_TEST(plan::launch_config(1000, 128).threads == 128u);
  // Beyond the cap the grid-stride loop covers the rest.
  BOOST_TEST(plan::launch_config(int64_t{1} << 40).blocks == 65536u);
  BOOST_TEST(plan::launch_config(10'000, 256, 4).blocks == 4u);
}

BOOST_AUTO_TEST_CASE(indexer_matches_strided_offsets) {
  const mg::Tensor x = mg::arange(0.0, 120.0, 1.0).reshape({2, 3, 4, 5});
  check_indexer(x);                                   // contiguous: one coalesced dim
  check_indexer(mg::F::transpose(x, 1, 3));           // permuted strides
  check_indexer(x.narrow(2, 1, 2));                   // a gap between runs
  check_indexer(mg::F::transpose(x.narrow(3, 2, 3), 0, 2));
  check_indexer(mg::F::broadcast_to(mg::arange(0.0, 4.0, 1.0, mg::DType::float16).reshape({4, 1}), {4, 6}));
  check_indexer(mg::scalar(1.0, mg::DType::float64));  // 0-d
  check_indexer(mg::zeros({3, 0, 2}));                 // empty
}

BOOST_AUTO_TEST_CASE(indexer_coalesces_contiguous_tensors_to_one_dimension) {
  const mg::Tensor x = mg::zeros({4, 5, 6}, mg::DType::bfloat16);
  const auto ix = plan::make_indexer<1>(x.shape(), {mg::backend::byte_strides(x)});
  BOOST_TEST(ix.ndim == 1);
  BOOST_TEST(ix.extent[0] == 120);
  BOOST_TEST(ix.stride[0][0] == 2);
  const auto tx = plan::make_indexer<1>({5, 4}, {mg::backend::byte_strides(mg::F::transpose(mg::zeros({4, 5}), 0, 1))});
  BOOST_TEST(tx.ndim == 2);
}

BOOST_AUTO_TEST_CASE(cuda_requests_without_a_device_are_device_errors) {
  if (mg::cuda::device_count() > 0) return;  // covered by the device suite there
  const mg::Tensor x = mg::ones({2, 3});
  BOOST_CHECK_EXCEPTION(x.to(mg::Device::cuda()), mg::DeviceError, [](const mg::DeviceError& e) {
    const std::string m = e.what();
    return m.find("Tensor::to") != std::string::npos && m.find("float32[2, 3]") != std::string::npos &&
           m.find("cuda:0") != std::string::npos;
  });
  BOOST_CHECK_THROW(mg::zeros({2}, mg::DType::float32, mg::Device::cuda()), mg::DeviceError);
  BOOST_TEST(x.to(mg::Device::cpu()).impl() == x.impl());  // same device: the same tensor
}

BOOST_AUTO_TEST_CASE(the_cuda_runtime_api_answers_without_a_device) {
  if (mg::cuda::device_count() > 0) return;  // covered by the device suite there
  BOOST_TEST(!mg::cuda::is_available());
  BOOST_TEST(mg::cuda::device_count() == 0);
  BOOST_CHECK_EXCEPTION(mg::cuda::synchronize(), mg::DeviceError, [](const mg::DeviceError& e) {
    return std::string(e.what()).find("cuda::synchronize") != std::string::npos;
  });
  BOOST_CHECK_THROW(mg::cuda::synchronize(0), mg::DeviceError);
  BOOST_CHECK_THROW(mg::cuda::memory_stats(0), mg::DeviceError);
  BOOST_CHECK_THROW(mg::cuda::reset_peak_memory_stats(0), mg::DeviceError);
  BOOST_CHECK_THROW(mg::arange(3, mg::DType::int64, mg::Device::cuda()), mg::DeviceError);
  BOOST_TEST(!mg::cuda::fused_attention_available(0));
  BOOST_TEST(mg::cuda::fused_attention_calls() == 0);
  BOOST_CHECK_EXCEPTION(mg::empty({2}, mg::DType::float32, mg::Device::cuda(1)), mg::DeviceError,
                        [](const mg::DeviceError& e) { return std::string(e.what()).find("cuda:1") != std::string::npos; });
}
