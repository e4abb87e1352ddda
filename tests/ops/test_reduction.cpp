// Focused tests of the reductions: error messages, argmax's first maximum,
// keepdim shapes, values and gradients worked out by hand (max / min send
// theirs to the first extreme, prod's is exact at zeros), sum_to, the
// parallel reduction paths against a double reference, and autocast.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "ops_test_util.hpp"

namespace {

namespace mg = mixgrad;
namespace F = mg::F;
using mg::DType;
using namespace ops_test;

}  // namespace

BOOST_AUTO_TEST_SUITE(reduction)

BOOST_AUTO_TEST_CASE(reduction_errors_name_the_op_and_the_tensor) {
  const auto x = mg::zeros({2, 3});
  auto m = message_of<mg::ShapeError>([&] { F::sum(x, 2); });
  BOOST_TEST(contains(m, "sum"));
  BOOST_TEST(contains(m, "axis 2"));
  BOOST_TEST(contains(m, "float32[2, 3]"));

  m = message_of<mg::ShapeError>([&] { F::mean(x, {0, -2}); });
  BOOST_TEST(contains(m, "repeated"));

  m = message_of<mg::DTypeError>([] { F::mean(mg::zeros({4}, DType::int64)); });
  BOOST_TEST(contains(m, "mean"));
  BOOST_TEST(contains(m, "int64[4]"));

  m = message_of<mg::ShapeError>([] { F::max(mg::zeros({0, 3}), 0); });
  BOOST_TEST(contains(m, "max"));
  BOOST_TEST(contains(m, "float32[0, 3]"));

  m = message_of<mg::ShapeError>([&] { F::argmax(x, -3); });
  BOOST_TEST(contains(m, "argmax"));

  m = message_of<mg::ShapeError>([&] { F::sum_to(x, {2}); });
  BOOST_TEST(contains(m, "sum_to"));
  BOOST_TEST(contains(m, "float32[2, 3]"));

  BOOST_CHECK_THROW(F::norm(x, 0.0), mg::ValueError);
  BOOST_CHECK_THROW(F::norm(x, std::nan("")), mg::ValueError);
  BOOST_CHECK_THROW(F::var(x, {}, false, -1), mg::ValueError);
}

BOOST_AUTO_TEST_CASE(argmax_takes_the_first_maximum) {
  const auto x = t({1, 3, 3, 5, kNaN, 7}, {2, 3});
  const auto a = F::argmax(x, 1);
  BOOST_TEST(a.dtype() == DType::int64);
  BOOST_TEST(a.shape() == mg::Shape({2}));
  check_close(vals(a), {1, 1});  // first of the tied 3s; NaN counts as the maximum
  check_close(vals(F::argmax(x, 0)), {1, 1, 1});
  check_close(vals(F::argmax(t({4, 1, 4, 0}, {2, 2}), 0)), {0, 0});
  const auto k = F::argmax(x, -1, true);
  BOOST_TEST(k.shape() == mg::Shape({2, 1}));
  check_close(vals(F::argmax(t({3, 9, 9, 1}, {4}, DType::int64), 0)), {1});
  check_close(vals(F::argmax(F::transpose(t({1, 5, 2, 0, 7, 3}, {2, 3}), 0, 1), 1)), {0, 1, 1});
  BOOST_TEST(F::argmax(mg::scalar(2.0), 0).item<int64_t>() == 0);
  // The column loop (inner > 1) reads 16-bit rows converted to float.
  const auto cols = t({2, 7, 1, 9, 7, kNaN, 9, 8, 3}, {3, 3});
  for (const DType d : {DType::float32, DType::float16, DType::bfloat16})
    check_close(vals(F::argmax(cols.to(d), 0)), {1, 2, 1});
}

BOOST_AUTO_TEST_CASE(keepdim_shapes) {
  const auto x = mg::ones({2, 3, 4});
  BOOST_TEST(F::sum(x, {0, 2}, true).shape() == mg::Shape({1, 3, 1}));
  BOOST_TEST(F::sum(x, {0, 2}).shape() == mg::Shape({3}));
  BOOST_TEST(F::mean(x, -1, true).shape() == mg::Shape({2, 3, 1}));
  BOOST_TEST(F::max(x).shape() == mg::Shape{});
  BOOST_TEST(F::max(x, {}, true).shape() == mg::Shape({1, 1, 1}));
  BOOST_TEST(F::var(x, 1, true).shape() == mg::Shape({2, 1, 4}));
  BOOST_TEST(F::norm(x, 2.0, {1, 2}).shape() == mg::Shape({2}));
  BOOST_TEST(F::min(x, {-1, 0}, true).shape() == mg::Shape({1, 3, 1}));
  check_close(vals(F::sum(x, {0, 2}, true)), {8, 8, 8});
  // keepdim gradients come back in x's shape
  const auto g = grads({x}, [](const auto& in) { return F::mean(in[0], {0, 2}, true); });
  BOOST_TEST(g[0].shape() == x.shape());
  check_close(vals(g[0]), Vec(24, 1.0 / 8));
}

BOOST_AUTO_TEST_CASE(reduction_values_and_gradients) {
  const auto x = t({1, 2, 3, 4}, {4});
  check_close(vals(F::mean(x)), {2.5});
  check_close(vals(F::var(x)), {1.25});
  check_close(vals(F::var(x, {}, false, 1)), {5.0 / 3});
  check_close(vals(F::norm(x)), {std::sqrt(30.0)});
  check_close(vals(F::norm(x, 1.0)), {10});
  check_close(vals(F::norm(x, kInf)), {4});
  check_close(vals(F::norm(x, 3.0)), {std::cbrt(100.0)}, 1e-5);
  const auto m = t({1, 2, 3, 5}, {2, 2});
  check_close(vals(F::var(m, 0)), {1, 2.25});
  check_close(vals(F::mean(m, 1)), {1.5, 4});
  check_close(vals(F::sum(m, 0)), {4, 7});

  auto g = grads({x}, [](const auto& in) { return F::var(in[0]); });
  check_close(vals(g[0]), {2 * -1.5 / 4, 2 * -0.5 / 4, 2 * 0.5 / 4, 2 * 1.5 / 4});
  g = grads({x}, [](const auto& in) { return F::norm(in[0]); });
  const double n = std::sqrt(30.0);
  check_close(vals(g[0]), {1 / n, 2 / n, 3 / n, 4 / n});
  // the norm of zeros has a zero (not NaN) gradient
  g = grads({mg::zeros({3})}, [](const auto& in) { return F::norm(in[0]); });
  check_close(vals(g[0]), {0, 0, 0});
}

BOOST_AUTO_TEST_CASE(extreme_gradients_go_to_the_first_extreme) {
  auto g = grads({t({1, 3, 3, 2}, {4})}, [](const auto& in) { return F::max(in[0]); });
  check_close(vals(g[0]), {0, 1, 0, 0});
  g = grads({t({2, 1, 1}, {3})}, [](const auto& in) { return F::min(in[0]); });
  check_close(vals(g[0]), {0, 1, 0});
  // max over {0, 2} of [2, 2, 2]: groups are x[:, j, :] in row-major order.
  const auto x = t({1, 5, 2, 2, 5, 0, 2, 1}, {2, 2, 2});
  g = grads({x}, [](const auto& in) { return F::max(in[0], {0, 2}); });
  check_close(vals(g[0]), {0, 1, 1, 0, 0, 0, 0, 0});
  g = grads({x}, [](const auto& in) { return F::max(in[0], {0, 2}, true); }, t({3, 7}, {1, 2, 1}));
  check_close(vals(g[0]), {0, 3, 7, 0, 0, 0, 0, 0});
}

BOOST_AUTO_TEST_CASE(sum_to_reduces_broadcast_dimensions) {
  const auto x = mg::arange(0.0, 24.0, 1.0, DType::float32).reshape({2, 3, 4});
  BOOST_TEST(F::sum_to(x, x.shape()).id() == x.id());
  const auto s = F::sum_to(x, {3, 1});
  BOOST_TEST(s.shape() == mg::Shape({3, 1}));
  Vec want(3, 0.0);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) want[j] += i * 12 + j * 4 + k;
  check_close(vals(s), want);
  check_close(vals(F::sum_to(x, {4})), {60, 66, 72, 78});
  // bfloat16 accumulates in float: 4000 values of 1 sum to 4000 exactly (a
  // bfloat16 accumulator would stop at 256).
  const auto ones = mg::ones({4000, 1}, DType::bfloat16);
  BOOST_TEST(F::sum_to(ones, {1}).item<double>() == 4000.0);
}

// Large enough to take the parallel paths; compared with plain double loops.
BOOST_AUTO_TEST_CASE(large_reductions_match_a_double_reference) {
  mg::manual_seed(3);
  {  // [N, C] -> [C] with few columns: the rows are split across threads
    const int64_t n = 100000, c = 3;
    const auto x = mg::uniform({n, c}, -1, 1);
    const auto v = vals(x);
    Vec want(c, 0.0);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < c; ++j) want[j] += v[i * c + j];
    check_close(vals(F::sum(x, 0)), want, 1e-4);
  }
  {  // the same in bfloat16 (converted block-wise), var (centered) and max
    const int64_t n = 50000, c = 5;
    auto x = mg::uniform({n, c}, -1, 1);
    x.data<float>()[777 * c + 2] = 3.f;
    const auto xb = x.to(DType::bfloat16);
    const auto v = vals(xb);
    Vec sum(c, 0.0), sq(c, 0.0), mx(c, -kInf);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < c; ++j) sum[j] += v[i * c + j], mx[j] = std::max(mx[j], v[i * c + j]);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < c; ++j) sq[j] += std::pow(v[i * c + j] - sum[j] / n, 2);
    Vec var(c);
    for (int64_t j = 0; j < c; ++j) var[j] = sq[j] / (n - 1);
    check_close(vals(F::sum(xb, 0)), sum, 1e-2);
    check_close(vals(F::var(xb, 0, false, 1)), var, 1e-2);
    check_close(vals(F::max(xb, 0)), mx, 0);
    check_close(vals(F::var(xb.to(DType::float32), 0, false, 1)), var, 1e-5);
    BOOST_TEST(F::argmax(xb, 0).at<int64_t>({2}) == 777);
  }
  {  // [N, C, H, W] -> [C] over {0, 2, 3}, and its mean and var
    const auto x = mg::uniform({64, 8, 16, 16}, 0, 2);
    const auto v = vals(x);
    Vec sum(8, 0.0), sq(8, 0.0);
    for (int64_t i = 0; i < 64; ++i)
      for (int64_t ch = 0; ch < 8; ++ch)
        for (int64_t k = 0; k < 256; ++k) sum[ch] += v[(i * 8 + ch) * 256 + k];
    Vec mean(8), var(8);
    for (int ch = 0; ch < 8; ++ch) mean[ch] = sum[ch] / (64 * 256);
    for (int64_t i = 0; i < 64; ++i)
      for (int64_t ch = 0; ch < 8; ++ch)
        for (int64_t k = 0; k < 256; ++k) sq[ch] += std::pow(v[(i * 8 + ch) * 256 + k] - mean[ch], 2);
    for (int ch = 0; ch < 8; ++ch) var[ch] = sq[ch] / (64 * 256);
    check_close(vals(F::sum(x, {0, 2, 3})), sum, 1e-5);
    check_close(vals(F::mean(x, {0, 2, 3})), mean, 1e-5);
    check_close(vals(F::var(x, {0, 2, 3})), var, 1e-4);
  }
  {  // many rows reduced along the last axis; max with a planted maximum
    auto x = mg::uniform({300, 1000}, -1, 1);
    x.data<float>()[123 * 1000 + 456] = 5.f;
    const auto v = vals(x);
    Vec want(300, 0.0);
    for (int64_t i = 0; i < 300; ++i)
      for (int64_t j = 0; j < 1000; ++j) want[i] += v[i * 1000 + j];
    check_close(vals(F::sum(x, -1)), want, 1e-4);
    BOOST_TEST(F::max(x).item<double>() == 5.0);
    BOOST_TEST(F::argmax(x, 1).at<int64_t>({123}) == 456);
    BOOST_TEST(F::argmax(F::reshape(x, {-1}), 0).item<int64_t>() == 123 * 1000 + 456);
  }
  {  // reduce-all of one long run, in float32 and bfloat16
    const auto x = mg::uniform({1 << 20}, 0, 1);
    const auto v = vals(x);
    double want = 0;
    for (double e : v) want += e;
    check_close(vals(F::sum(x)), {want}, 1e-5);
    const auto xb = x.to(DType::bfloat16);
    double want_b = 0;
    for (double e : vals(xb)) want_b += e;
    check_close(vals(F::sum(xb)), {want_b}, 8e-3);  // the bfloat16 result's own rounding
    check_close(vals(F::mean(xb.to(DType::float16))), {want_b / (1 << 20)}, 2e-3);
  }
  {  // a transposed (strided) large input
    const auto x = mg::uniform({512, 300}, -1, 1);
    const auto v = vals(x);
    Vec want(512, 0.0);
    for (int64_t i = 0; i < 512; ++i)
      for (int64_t j = 0; j < 300; ++j) want[i] += v[i * 300 + j];
    check_close(vals(F::sum(F::transpose(x, 0, 1), 0)), want, 1e-4);
  }
  {  // variance of values far from 0 keeps its precision (two passes)
    const auto x = mg::uniform({100000}, 1000, 1001);
    const auto v = vals(x);
    double m = 0, s = 0;
    for (double e : v) m += e;
    m /= static_cast<double>(v.size());
    for (double e : v) s += (e - m) * (e - m);
    check_close(vals(F::var(x)), {s / static_cast<double>(v.size())}, 1e-3);
  }
}

BOOST_AUTO_TEST_CASE(prod_values_and_gradient_at_zeros) {
  const auto x = t({1, 2, 3, 4, 5, 6}, {2, 3}, DType::float64);
  check_close(vals(F::prod(x, 1)), {6, 120});
  BOOST_TEST(F::prod(x, 0, true).shape() == mg::Shape({1, 3}));
  check_close(vals(F::prod(x, 0)), {4, 10, 18});
  // One zero: its gradient is the product of the others; two zeros: all 0.
  const auto z = t({2, 0, 3, 0, 5, 0}, {2, 3}, DType::float64);
  const auto g = grads({z}, [](const auto& in) { return F::prod(in[0], 1); });
  check_close(vals(g[0]), {0, 6, 0, 0, 0, 0});
  BOOST_CHECK_THROW(F::prod(x, 2), mg::ShapeError);
  BOOST_CHECK_THROW(F::prod(t({1, 2}, {2}, DType::int64), 0), mg::DTypeError);
}

BOOST_AUTO_TEST_CASE(autocast_runs_sums_and_products_in_float32) {
  const auto xb = mg::uniform({2, 3}, -1, 1, DType::bfloat16);
  mg::amp::autocast scope(true, DType::bfloat16);
  BOOST_TEST(F::sum(xb).dtype() == DType::float32);
  BOOST_TEST(F::prod(xb, 1).dtype() == DType::float32);
  BOOST_TEST(F::max(xb).dtype() == DType::bfloat16);
}

BOOST_AUTO_TEST_SUITE_END()
