// Collectives on every dtype and odd sizes. Each rank r contributes values
// f(r, i) = (r + 1) * (i % 5 + 1); the expected sums, means and maxima are
// written out from that formula (small integers: exact in every dtype).
#include <cmath>
#include <vector>

#include "../common/test_util.hpp"
#include "dist_util.hpp"

namespace mg = mixgrad;
namespace dist = mixgrad::distributed;
using dist_test::world;
using test_util::values;

namespace {

double f(int r, int64_t i) { return (r + 1) * static_cast<double>(i % 5 + 1); }

mg::Tensor filled(int r, int64_t n, mg::DType d) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = f(r, i);
  return mg::tensor(v, mg::Shape{n}, d);
}

const mg::DType kNumeric[] = {mg::DType::float32, mg::DType::float64, mg::DType::float16,
                              mg::DType::bfloat16, mg::DType::int32,   mg::DType::int64,
                              mg::DType::int8,     mg::DType::uint8};
const int64_t kSizes[] = {1, 7, 1001, 0};

}  // namespace

BOOST_AUTO_TEST_SUITE(collectives)

BOOST_AUTO_TEST_CASE(all_reduce_sum_mean_max_every_dtype) {
  const int W = world().world_size(), r = world().rank();
  for (mg::DType d : kNumeric)
    for (int64_t n : kSizes) {
      BOOST_TEST_CONTEXT(mg::to_string(d) << "[" << n << "] on " << W << " ranks") {
        mg::Tensor s = filled(r, n, d), x = filled(r, n, d);
        dist::all_reduce(world(), s, dist::ReduceOp::sum);
        dist::all_reduce(world(), x, dist::ReduceOp::max);
        const auto vs = values(s), vx = values(x);
        BOOST_TEST(static_cast<int64_t>(vs.size()) == n);
        for (int64_t i = 0; i < n; ++i) {
          const double k = static_cast<double>(i % 5 + 1);
          BOOST_TEST(vs[i] == k * W * (W + 1) / 2);
          BOOST_TEST(vx[i] == k * W);
        }
        if (mg::is_floating_point(d)) {
          mg::Tensor m = filled(r, n, d);
          dist::all_reduce(world(), m, dist::ReduceOp::mean);
          const auto vm = values(m);
          for (int64_t i = 0; i < n; ++i) BOOST_TEST(vm[i] == (i % 5 + 1) * (W + 1) / 2.0);
        }
      }
    }
}

BOOST_AUTO_TEST_CASE(bool_max_is_logical_or) {
  const int W = world().world_size(), r = world().rank();
  std::vector<bool> v(11);
  for (int i = 0; i < 11; ++i) v[i] = (i + r) % 3 == 0;
  mg::Tensor b = mg::tensor(v, mg::Shape{11});
  dist::all_reduce(world(), b, dist::ReduceOp::max);
  const auto got = values(b);
  for (int i = 0; i < 11; ++i) {
    bool any = false;
    for (int q = 0; q < W; ++q) any = any || (i + q) % 3 == 0;
    BOOST_TEST(got[i] == (any ? 1.0 : 0.0));
  }
}

// As PyTorch's: an int8 / uint8 sum wraps modulo 256 instead of saturating.
BOOST_AUTO_TEST_CASE(int8_and_uint8_sums_wrap) {
  const int W = world().world_size(), r = world().rank();
  mg::Tensor s8 = mg::tensor(std::vector<int8_t>{100, -100, static_cast<int8_t>(r)}, mg::Shape{3});
  mg::Tensor u8 = mg::tensor(std::vector<uint8_t>{200, 1, static_cast<uint8_t>(r)}, mg::Shape{3});
  dist::all_reduce(world(), s8, dist::ReduceOp::sum);
  dist::all_reduce(world(), u8, dist::ReduceOp::sum);
  const auto wrap8 = [](int64_t v) { return static_cast<double>(static_cast<int8_t>(static_cast<uint8_t>(v & 0xff))); };
  const auto wrapu8 = [](int64_t v) { return static_cast<double>(v & 0xff); };
  const int64_t ranks = W * (W - 1) / 2;  // 0 + 1 + ... + (W - 1)
  BOOST_TEST(values(s8) == std::vector<double>({wrap8(100 * W), wrap8(-100 * W), wrap8(ranks)}),
             boost::test_tools::per_element());
  BOOST_TEST(values(u8) == std::vector<double>({wrapu8(200 * W), wrapu8(W), wrapu8(ranks)}),
             boost::test_tools::per_element());
  test_util::check_error<mg::DTypeError>([&] { dist::all_reduce(world(), u8, dist::ReduceOp::mean); },
                                         {"all_reduce", "mean", "uint8[3]"});
}

BOOST_AUTO_TEST_CASE(broadcast_and_all_gather_every_dtype) {
  const int W = world().world_size(), r = world().rank();
  const int root = W - 1;
  for (mg::DType d : {mg::DType::float32, mg::DType::float64, mg::DType::float16, mg::DType::bfloat16,
                      mg::DType::int32, mg::DType::int64, mg::DType::bool_, mg::DType::int8, mg::DType::uint8})
    for (int64_t n : kSizes) {
      BOOST_TEST_CONTEXT(mg::to_string(d) << "[" << n << "]") {
        mg::Tensor t = filled(r, n, d);
        dist::broadcast(world(), t, root);
        const mg::Tensor want = filled(root, n, d);
        BOOST_TEST(values(t) == values(want), boost::test_tools::per_element());

        mg::Tensor x = filled(r, n, d).reshape(mg::Shape{1, n});
        mg::Tensor all = dist::all_gather(world(), x);
        BOOST_TEST(all.shape() == mg::Shape({W, 1, n}));
        const auto va = values(all);
        for (int q = 0; q < W; ++q) {
          const auto vq = values(filled(q, n, d));
          for (int64_t i = 0; i < n; ++i) BOOST_TEST(va[q * n + i] == vq[i]);
        }
      }
    }
}

BOOST_AUTO_TEST_CASE(async_work_completes_on_wait) {
  const int W = world().world_size(), r = world().rank();
  mg::Tensor a = filled(r, 257, mg::DType::float32), b = filled(r, 3, mg::DType::bfloat16);
  dist::Work wa = dist::all_reduce_async(world(), a, dist::ReduceOp::sum);
  dist::Work wb = dist::all_reduce_async(world(), b, dist::ReduceOp::mean);
  wb.wait();
  wa.wait();
  BOOST_TEST(wa.test());
  BOOST_TEST(values(a)[6] == 2.0 * W * (W + 1) / 2);
  BOOST_TEST(values(b)[2] == 3.0 * (W + 1) / 2);
}

BOOST_AUTO_TEST_CASE(bad_input_throws_before_communicating) {
  mg::Tensor i = mg::tensor(std::vector<int32_t>{1, 2}, mg::Shape{2});
  test_util::check_error<mg::DTypeError>([&] { dist::all_reduce(world(), i, dist::ReduceOp::mean); },
                                         {"all_reduce", "mean", "int32[2]"});
  mg::Tensor b = mg::tensor(std::vector<bool>{true}, mg::Shape{1});
  test_util::check_error<mg::DTypeError>([&] { dist::all_reduce(world(), b, dist::ReduceOp::sum); },
                                         {"all_reduce", "bool[1]"});
  mg::Tensor m = mg::zeros({3, 4}).narrow(1, 0, 2);
  test_util::check_error<mg::ValueError>([&] { dist::all_reduce(world(), m, dist::ReduceOp::sum); },
                                         {"all_reduce", "not contiguous"});
  test_util::check_error<mg::ValueError>([&] { dist::broadcast(world(), mg::zeros({2}), world().world_size()); },
                                         {"broadcast", "root"});
  test_util::check_error<mg::ValueError>([&] { dist::parse_reduce_op("avg"); }, {"avg"});
  // The group still works after the refusals (nothing was half-sent).
  mg::Tensor ok = mg::ones({2});
  dist::all_reduce(world(), ok, dist::ReduceOp::sum);
  BOOST_TEST(values(ok)[1] == world().world_size());
}

BOOST_AUTO_TEST_SUITE_END()
