// The NCCL path on one rank (one GPU): collectives on CUDA tensors of every
// dtype on the current stream, and the reducer's bucket copies on the
// device. Built in CUDA builds with NCCL; exits 77 (skipped) without a CUDA
// device. Several GPUs are needed to see NCCL move data between ranks; with
// one rank the results equal the inputs, which still runs every call
// (communicator bootstrap over MPI, the dtype and op mapping, the stream).
#define BOOST_TEST_MODULE mixgrad distributed nccl
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <vector>

#include "mixgrad/distributed.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace dist = mixgrad::distributed;

namespace {

const mg::Device kGpu = mg::Device::cuda(0);

std::vector<double> host(const mg::Tensor& t) {
  mg::cuda::synchronize();
  return t.to(mg::Device::cpu()).to_vector<double>();
}

mg::Tensor filled(int64_t n, mg::DType d) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(i % 7 + 1);
  return mg::tensor(v, mg::Shape{n}, d);
}

}  // namespace

BOOST_AUTO_TEST_CASE(collectives_on_cuda_tensors) {
  auto group = dist::init_process_group();
  BOOST_TEST_REQUIRE(group.world_size() == 1);  // one GPU: one rank
  for (mg::DType d : {mg::DType::float32, mg::DType::float16, mg::DType::bfloat16, mg::DType::float64,
                      mg::DType::int32, mg::DType::int64, mg::DType::int8, mg::DType::uint8})
    for (int64_t n : {1, 7, 1001}) {
      BOOST_TEST_CONTEXT(mg::to_string(d) << "[" << n << "]") {
        const auto want = filled(n, d).to_vector<double>();
        for (dist::ReduceOp op : {dist::ReduceOp::sum, dist::ReduceOp::max, dist::ReduceOp::mean}) {
          if (!mg::is_floating_point(d) && op == dist::ReduceOp::mean) continue;
          mg::Tensor t = filled(n, d).to(kGpu);
          dist::all_reduce(group, t, op);
          BOOST_TEST(host(t) == want, boost::test_tools::per_element());
        }
        mg::Tensor b = filled(n, d).to(kGpu);
        dist::broadcast(group, b, 0);
        BOOST_TEST(host(b) == want, boost::test_tools::per_element());
        mg::Tensor all = dist::all_gather(group, filled(n, d).to(kGpu));
        BOOST_TEST(all.shape() == mg::Shape({1, n}));
        BOOST_TEST(host(all) == want, boost::test_tools::per_element());
      }
    }
}

BOOST_AUTO_TEST_CASE(reducer_buckets_on_the_device) {
  auto group = dist::init_process_group();
  dist::GradReducer reducer(group, "mean", {.bucket_bytes = 12});  // 3 floats: the gradient straddles buckets
  mg::Tensor p = mg::zeros({10}).to(kGpu);
  mg::Tensor g = filled(10, mg::DType::float32).to(kGpu);
  mg::Tensor r = reducer.on_grad_ready(p, g);
  reducer.finish();
  BOOST_TEST(reducer.num_buckets() == 4);
  BOOST_TEST(host(r) == host(g), boost::test_tools::per_element());
}

int main(int argc, char* argv[]) {
  if (!mg::cuda::is_available()) {
    std::printf("no CUDA device available: the NCCL test needs one GPU (skipped)\n");
    return 77;
  }
  return boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
}
