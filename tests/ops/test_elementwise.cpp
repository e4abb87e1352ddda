// Focused tests of the elementwise ops: error messages, broadcasting, dtype
// promotion, comparisons, where, scalar forms and operators, NaN / inf,
// integer tensors, tie-breaking of gradients, low precision and autocast
// (these cases take a reduction or two as well, to show both kinds on the
// same inputs). Expected values are worked out by hand or by plain loops
// here. The reductions have their own file, test_reduction.cpp.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <limits>
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

BOOST_AUTO_TEST_SUITE(elementwise)

// pow(x, 2) runs as x * x and its gradient as g * (2 x) (ops/elementwise.cpp):
// the correctly rounded square and gradient, bit for bit, in float32 and
// bfloat16, over signs, zeros, subnormals, infinities and NaN, on a tensor
// long enough for every vector width and tail. (The kernel it replaces
// called libm's powf, which can be an ulp off: it fails this test.)
BOOST_AUTO_TEST_CASE(pow_of_two_is_the_correctly_rounded_square_forward_and_backward) {
  mg::manual_seed(3);
  std::vector<float> xv = mg::uniform({1000}, -1e3, 1e3).to_vector<float>();
  const float specials[] = {0.f, -0.f, 1e-40f, -1e-40f, 3e30f, 2e19f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  for (size_t i = 0; i < std::size(specials); ++i) xv[i * 97] = specials[i];
  const std::vector<float> gv = mg::uniform({1000}, -2, 2).to_vector<float>();
  for (DType dt : {DType::float32, DType::bfloat16}) {
    mg::Tensor x = F::astype(mg::tensor(xv, {1000}), dt).clone();
    const mg::Tensor g = F::astype(mg::tensor(gv, {1000}), dt);
    const std::vector<float> xs = x.to_vector<float>(), gs = g.to_vector<float>();
    mg::autodiff::GradManager gm;
    gm.attach(x);
    mg::Tensor y;
    {
      auto rec = gm.record();
      y = F::pow(x, 2.0);
      gm.backward(y, g);
    }
    // The references: the exact products in double (a product of two floats
    // is exact there) rounded to float, then to the tensor's dtype as the
    // kernels round their float results.
    const std::vector<float> want_y = F::astype(mg::tensor([&] {
      std::vector<float> v(xs.size());
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<double>(xs[i]) * xs[i]);
      return v;
    }(), {1000}), dt).to_vector<float>();
    const std::vector<float> want_g = F::astype(mg::tensor([&] {
      std::vector<float> v(xs.size());
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(static_cast<double>(gs[i]) * (2.0 * xs[i]));
      return v;
    }(), {1000}), dt).to_vector<float>();
    const std::vector<float> got_y = y.to_vector<float>(), got_g = x.grad().to_vector<float>();
    for (size_t i = 0; i < xs.size(); ++i) {
      const bool nan_y = std::isnan(want_y[i]), nan_g = std::isnan(want_g[i]);
      BOOST_TEST((nan_y ? std::isnan(got_y[i]) : got_y[i] == want_y[i]), "pow(" << xs[i] << ", 2) = " << got_y[i]);
      BOOST_TEST((nan_g ? std::isnan(got_g[i]) : got_g[i] == want_g[i]), "gradient at " << xs[i] << ": " << got_g[i]);
    }
  }
}

BOOST_AUTO_TEST_CASE(errors_name_the_op_the_shapes_and_the_dtypes) {
  const auto a = mg::zeros({2, 3});
  auto m = message_of<mg::ShapeError>([&] { F::add(a, mg::zeros({4})); });
  BOOST_TEST(contains(m, "add"));
  BOOST_TEST(contains(m, "float32[2, 3]"));
  BOOST_TEST(contains(m, "float32[4]"));

  m = message_of<mg::ShapeError>([&] { F::mul(mg::zeros({2}, DType::float16), mg::zeros({3}, DType::bfloat16)); });
  BOOST_TEST(contains(m, "mul"));
  BOOST_TEST(contains(m, "float16[2]"));
  BOOST_TEST(contains(m, "bfloat16[3]"));

  m = message_of<mg::DTypeError>([] { F::div(mg::zeros({3}, DType::int64), mg::ones({3}, DType::int64)); });
  BOOST_TEST(contains(m, "div"));
  BOOST_TEST(contains(m, "int64[3]"));

  m = message_of<mg::DTypeError>([] { F::exp(mg::zeros({2}, DType::int32)); });
  BOOST_TEST(contains(m, "exp"));
  BOOST_TEST(contains(m, "int32[2]"));

  m = message_of<mg::DTypeError>([] { F::add(mg::zeros({2}, DType::bool_), mg::zeros({2}, DType::bool_)); });
  BOOST_TEST(contains(m, "add"));
  BOOST_TEST(contains(m, "bool[2]"));

  m = message_of<mg::DTypeError>([] { F::pow(mg::zeros({2}, DType::int32), 2.0); });
  BOOST_TEST(contains(m, "pow"));

  m = message_of<mg::DTypeError>([] { F::where(mg::zeros({2}), mg::zeros({2}), mg::zeros({2})); });
  BOOST_TEST(contains(m, "where"));
  BOOST_TEST(contains(m, "float32[2]"));

  m = message_of<mg::ShapeError>(
      [] { F::where(mg::zeros({2}, DType::bool_), mg::zeros({3}), mg::zeros({2})); });
  BOOST_TEST(contains(m, "where"));
  BOOST_TEST(contains(m, "bool[2]"));
  BOOST_TEST(contains(m, "float32[3]"));

  m = message_of<mg::StateError>([&] { F::add(mg::Tensor(), a); });
  BOOST_TEST(contains(m, "add"));

  m = message_of<mg::ValueError>([&] { F::clamp(a, 1.0, -1.0); });
  BOOST_TEST(m == "clamp: lower bound 1.000000 is not <= upper bound -1.000000 (for float32[2, 3])");
}

BOOST_AUTO_TEST_CASE(a_throwing_op_leaves_the_recording_usable) {
  const auto x = t({1, 2, 3}, {3});
  mg::autodiff::GradManager gm;
  gm.attach(x);
  {
    auto rec = gm.record();
    const auto y = x * x;
    BOOST_CHECK_THROW(F::add(y, mg::zeros({2})), mg::ShapeError);
    BOOST_CHECK_THROW(F::log(F::astype(y, DType::int32)), mg::DTypeError);
    gm.backward(F::sum(y));
  }
  check_close(vals(x.grad()), {2, 4, 6});
}

BOOST_AUTO_TEST_CASE(broadcasting_follows_numpy) {
  const auto col = t({1, 2, 3}, {3, 1});
  const auto row = t({10, 20, 30, 40}, {1, 4});
  const auto s = col + row;
  BOOST_TEST(s.shape() == mg::Shape({3, 4}));
  check_close(vals(s), {11, 21, 31, 41, 12, 22, 32, 42, 13, 23, 33, 43});

  const auto p = F::mul(t({1, 2, 3, 4, 5, 6}, {2, 1, 3}), t({1, -1}, {2, 1}));
  BOOST_TEST(p.shape() == mg::Shape({2, 2, 3}));
  check_close(vals(p), {1, 2, 3, -1, -2, -3, 4, 5, 6, -4, -5, -6});

  const auto z = F::sub(mg::scalar(10.0), t({1, 2, 3, 4}, {2, 2}));  // 0-d with 2-d
  BOOST_TEST(z.shape() == mg::Shape({2, 2}));
  check_close(vals(z), {9, 8, 7, 6});

  // Gradients are summed back over the broadcast dimensions.
  const auto g = grads({col, row}, [](const auto& in) { return in[0] * in[1]; });
  BOOST_TEST(g[0].shape() == col.shape());
  BOOST_TEST(g[1].shape() == row.shape());
  check_close(vals(g[0]), {100, 100, 100});
  check_close(vals(g[1]), {6, 6, 6, 6});
}

BOOST_AUTO_TEST_CASE(bias_gradient_sums_the_batch) {
  const auto x = t({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
  const auto b = t({0.5, -0.5}, {2});
  const auto dy = t({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
  const auto g = grads({x, b}, [](const auto& in) { return in[0] + in[1]; }, dy);
  check_close(vals(g[1]), {1 + 3 + 5 + 7, 2 + 4 + 6 + 8});
  check_close(vals(g[0]), vals(dy));
}

BOOST_AUTO_TEST_CASE(mixed_dtypes_promote) {
  auto dt = [](DType a, DType b) { return F::add(mg::ones({2}, a), mg::ones({2}, b)).dtype(); };
  BOOST_TEST(dt(DType::float16, DType::bfloat16) == DType::float32);
  BOOST_TEST(dt(DType::float32, DType::float64) == DType::float64);
  BOOST_TEST(dt(DType::int32, DType::int64) == DType::int64);
  BOOST_TEST(dt(DType::int64, DType::float16) == DType::float16);
  BOOST_TEST(dt(DType::bool_, DType::int32) == DType::int32);
  BOOST_TEST(dt(DType::bfloat16, DType::bfloat16) == DType::bfloat16);

  // Each input's gradient comes back in its own dtype.
  const auto a = t({1, 2, 3}, {3}, DType::float16);
  const auto b = t({4, 5, 6}, {3}, DType::float32);
  const auto g = grads({a, b}, [](const auto& in) {
    const auto y = in[0] * in[1];
    BOOST_TEST(y.dtype() == DType::float32);
    return y;
  });
  BOOST_TEST(g[0].dtype() == DType::float16);
  BOOST_TEST(g[1].dtype() == DType::float32);
  check_close(vals(g[0]), {4, 5, 6});
  check_close(vals(g[1]), {1, 2, 3});
}

BOOST_AUTO_TEST_CASE(comparisons_give_bool) {
  const auto a = t({1, 2, kNaN}, {3});
  const auto b = t({2, 2, kNaN}, {3});
  const std::vector<std::pair<mg::Tensor, Vec>> cases = {
      {a == b, {0, 1, 0}}, {a != b, {1, 0, 1}}, {a < b, {1, 0, 0}},
      {a <= b, {1, 1, 0}}, {a > b, {0, 0, 0}},  {a >= b, {0, 1, 0}},
      {F::eq(a, b), {0, 1, 0}}, {F::ge(a, b), {0, 1, 0}},
      {a > 1.5, {0, 1, 0}}, {a < 1.5, {1, 0, 0}}, {a >= 2.0, {0, 1, 0}}, {a <= 1.0, {1, 0, 0}},
      {F::ne(a, 2.0), {1, 0, 1}},
  };
  for (const auto& [result, want] : cases) {
    BOOST_TEST(result.dtype() == DType::bool_);
    check_close(vals(result), want);
  }
  // Mixed dtypes compare after promotion: 1, 2, 3 against 1.5.
  const auto c = F::lt(t({1, 2, 3}, {3}, DType::int32), t({1.5}, {1}));
  BOOST_TEST(c.shape() == mg::Shape({3}));
  check_close(vals(c), {1, 0, 0});
}

BOOST_AUTO_TEST_CASE(where_selects_and_routes_gradients) {
  const auto cond = mg::tensor<bool>({true, false, true}, {3});
  const auto a = t({1, 2, 3}, {3});
  const auto b = t({10, 20, 30}, {3});
  check_close(vals(F::where(cond, a, b)), {1, 20, 3});

  // cond [2, 1], a [3], b 0-d -> [2, 3]
  const auto c2 = mg::tensor<bool>({true, false}, {2, 1});
  const auto b0 = mg::scalar(-1.0);
  const auto w = F::where(c2, a, b0);
  BOOST_TEST(w.shape() == mg::Shape({2, 3}));
  check_close(vals(w), {1, 2, 3, -1, -1, -1});
  const auto g = grads({a, b0}, [&](const auto& in) { return F::where(c2, in[0], in[1]); });
  check_close(vals(g[0]), {1, 1, 1});
  BOOST_TEST(g[1].shape() == mg::Shape{});
  check_close(vals(g[1]), {3});

  // a float16 and b float32 select in float32
  BOOST_TEST(F::where(cond, a.to(DType::float16), b).dtype() == DType::float32);
  // non-floating selects work too
  check_close(vals(F::where(cond, t({1, 2, 3}, {3}, DType::int64), t({0}, {1}, DType::int64))), {1, 0, 3});
}

BOOST_AUTO_TEST_CASE(scalar_overloads_and_operators) {
  const auto x = t({1, 2, 4}, {3});
  check_close(vals(x + 1.0), {2, 3, 5});
  check_close(vals(1.0 + x), {2, 3, 5});
  check_close(vals(x - 1.0), {0, 1, 3});
  check_close(vals(1.0 - x), {0, -1, -3});
  check_close(vals(2.0 * x), {2, 4, 8});
  check_close(vals(x * 2.0), {2, 4, 8});
  check_close(vals(x / 2.0), {0.5, 1, 2});
  check_close(vals(8.0 / x), {8, 4, 2});
  check_close(vals(-x), {-1, -2, -4});
  check_close(vals(x / x), {1, 1, 1});
  check_close(vals(x - x), {0, 0, 0});
  check_close(vals(F::pow(x, 2.0)), {1, 4, 16});
  check_close(vals(F::pow(x, t({0.5}, {1}))), {1, std::sqrt(2.0), 2});
  check_close(vals(F::maximum(x, 2.5)), {2.5, 2.5, 4});
  check_close(vals(F::minimum(x, 2.5)), {1, 2, 2.5});

  // The scalar takes the tensor's dtype: 2.7 becomes 2 for an int32 tensor,
  // 0.1 is rounded to float16 for a float16 tensor.
  const auto i = t({1, 2, 3}, {3}, DType::int32) + 2.7;
  BOOST_TEST(i.dtype() == DType::int32);
  check_close(vals(i), {3, 4, 5});
  const auto h = mg::zeros({2}, DType::float16) + 0.1;
  BOOST_TEST(h.dtype() == DType::float16);
  check_close(vals(h), {0.0999755859375, 0.0999755859375}, 0);

  // Gradients of the scalar forms.
  const auto g = grads({x}, [](const auto& in) { return 8.0 / in[0] + F::pow(in[0], 3.0) - 2.0 * in[0]; });
  check_close(vals(g[0]), {-8.0 + 3 - 2, -2.0 + 12 - 2, -0.5 + 48 - 2});
}

BOOST_AUTO_TEST_CASE(unary_values) {
  const auto x = t({-2, -0.5, 0.5, 2}, {4});
  check_close(vals(F::abs(x)), {2, 0.5, 0.5, 2});
  check_close(vals(F::relu(x)), {0, 0, 0.5, 2});
  check_close(vals(F::leaky_relu(x, 0.1)), {-0.2, -0.05, 0.5, 2});
  check_close(vals(F::clamp(x, -1, 1)), {-1, -0.5, 0.5, 1});
  check_close(vals(F::sigmoid(x)), {1 / (1 + std::exp(2.0)), 1 / (1 + std::exp(0.5)), 1 / (1 + std::exp(-0.5)),
                                    1 / (1 + std::exp(-2.0))});
  check_close(vals(F::tanh(x)), {std::tanh(-2.0), std::tanh(-0.5), std::tanh(0.5), std::tanh(2.0)});
  check_close(vals(F::gelu(x)), {-2 * 0.5 * std::erfc(2 / std::sqrt(2.0)), -0.5 * 0.5 * std::erfc(0.5 / std::sqrt(2.0)),
                                 0.5 * 0.5 * (1 + std::erf(0.5 / std::sqrt(2.0))), 2 * 0.5 * (1 + std::erf(2 / std::sqrt(2.0)))});
  check_close(vals(F::silu(x)), {-2 / (1 + std::exp(2.0)), -0.5 / (1 + std::exp(0.5)), 0.5 / (1 + std::exp(-0.5)),
                                 2 / (1 + std::exp(-2.0))});
  const auto p = t({0.25, 1, 4}, {3});
  check_close(vals(F::sqrt(p)), {0.5, 1, 2});
  check_close(vals(F::rsqrt(p)), {2, 1, 0.5});
  check_close(vals(F::log(p)), {std::log(0.25), 0, std::log(4.0)});
  check_close(vals(F::exp(p)), {std::exp(0.25), std::exp(1.0), std::exp(4.0)});
  // clamp passes the gradient inside [lo, hi] only
  const auto g = grads({x}, [](const auto& in) { return F::clamp(in[0], -1, 1); });
  check_close(vals(g[0]), {0, 1, 1, 0});
}

// float32 tanh has its own implementation (see kernels/unary.hpp): it must
// stay within a few ulp of the exact value over the whole range.
BOOST_AUTO_TEST_CASE(float_tanh_is_accurate) {
  const auto x = mg::arange(-12.0, 12.0, 1.0 / 4096, DType::float32);
  const auto y = vals(F::tanh(x));
  const auto xv = vals(x);
  double worst = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    const double exact = std::tanh(xv[i]);
    worst = std::max(worst, std::abs(y[i] - exact) / std::max(std::abs(exact), 1e-30));
  }
  BOOST_TEST(worst < 3e-7);
  check_close(vals(F::tanh(t({0.0, -0.0, 1e-30, 30, -30, kInf, -kInf, kNaN}, {8}))), {0, 0, 1e-30, 1, -1, 1, -1, kNaN}, 1e-7);
  BOOST_TEST(std::signbit(F::tanh(t({-0.0}, {1})).item<float>()));
}

BOOST_AUTO_TEST_CASE(nan_and_inf) {
  check_close(vals(F::max(t({1, kNaN, 3}, {3}))), {kNaN});
  check_close(vals(F::min(t({1, kNaN, 3}, {3}))), {kNaN});
  check_close(vals(F::max(t({1, 2, kNaN, 4}, {2, 2}), 1)), {2, kNaN});
  check_close(vals(F::max(t({-kInf, -kInf}, {2}))), {-kInf});
  check_close(vals(F::sum(t({1, kInf}, {2}))), {kInf});
  check_close(vals(F::relu(t({kNaN, -kInf, kInf, -1, 2}, {5}))), {kNaN, 0, kInf, 0, 2});
  check_close(vals(F::maximum(t({kNaN, 1}, {2}), t({1, kNaN}, {2}))), {kNaN, kNaN});
  check_close(vals(F::minimum(t({kNaN, 1}, {2}), t({1, kNaN}, {2}))), {kNaN, kNaN});
  check_close(vals(F::clamp(t({kNaN, -kInf, kInf}, {3}), -1, 1)), {kNaN, -1, 1});
  // relu's gradient at exactly 0 is 0
  const auto g = grads({t({-1, 0, 1}, {3})}, [](const auto& in) { return F::relu(in[0]); });
  check_close(vals(g[0]), {0, 0, 1});
  // in float16 too
  check_close(vals(F::relu(t({kNaN, -kInf, 3}, {3}, DType::float16))), {kNaN, 0, 3});
  check_close(vals(F::max(t({1, kNaN, 3}, {3}, DType::bfloat16))), {kNaN});
}

BOOST_AUTO_TEST_CASE(integer_tensors) {
  const auto i = t({1, -2, 3}, {3}, DType::int32);
  for (const auto& y : {-i, F::abs(i), F::relu(i), F::clamp(i, -1, 2), i * i, i - i, F::maximum(i, 0.0)})
    BOOST_TEST(y.dtype() == DType::int32);
  check_close(vals(-i), {-1, 2, -3});
  check_close(vals(F::abs(i)), {1, 2, 3});
  check_close(vals(F::relu(i)), {1, 0, 3});
  check_close(vals(F::clamp(i, -1, 2)), {1, -1, 2});
  check_close(vals(i * i), {1, 4, 9});
  check_close(vals(F::maximum(i, t({0, 0, 5}, {3}, DType::int32))), {1, 0, 5});

  // Integer sums accumulate and come back in int64; max / min keep the dtype.
  const auto s = F::sum(i);
  BOOST_TEST(s.dtype() == DType::int64);
  BOOST_TEST(s.item<int64_t>() == 2);
  BOOST_TEST(F::max(i).dtype() == DType::int32);
  BOOST_TEST(F::max(i).item<int32_t>() == 3);
  BOOST_TEST(F::min(i).item<int32_t>() == -2);
  const auto big = mg::full({3}, 2e9, DType::int32);
  BOOST_TEST(F::sum(big).item<int64_t>() == 6000000000);
  // Counting a mask: sum of bool is an int64 count.
  const auto count = F::sum(mg::tensor<bool>({true, false, true, true}, {4}));
  BOOST_TEST(count.dtype() == DType::int64);
  BOOST_TEST(count.item<int64_t>() == 3);
}

BOOST_AUTO_TEST_CASE(maximum_and_minimum_split_a_tie) {
  // the gradient of a tie goes half to each side
  const auto a = t({1, 2}, {2});
  const auto b = t({1, 3}, {2});
  auto g = grads({a, b}, [](const auto& in) { return F::maximum(in[0], in[1]); });
  check_close(vals(g[0]), {0.5, 0});
  check_close(vals(g[1]), {0.5, 1});
  g = grads({a, b}, [](const auto& in) { return F::minimum(in[0], in[1]); });
  check_close(vals(g[0]), {0.5, 1});
  check_close(vals(g[1]), {0.5, 0});
}

BOOST_AUTO_TEST_CASE(zero_size_tensors) {
  const auto e = mg::zeros({0, 3});
  BOOST_TEST((e + mg::ones({3})).shape() == mg::Shape({0, 3}));
  BOOST_TEST(F::relu(e).numel() == 0);
  check_close(vals(F::sum(e, 0)), {0, 0, 0});
  BOOST_TEST(F::sum(e, 1).shape() == mg::Shape({0}));
  check_close(vals(F::sum(e)), {0});
  check_close(vals(F::mean(e, 0)), {kNaN, kNaN, kNaN});
  check_close(vals(F::norm(e, 2.0, 0)), {0, 0, 0});
}

BOOST_AUTO_TEST_CASE(strided_inputs) {
  const auto x = F::transpose(t({1, 2, 3, 4, 5, 6}, {2, 3}), 0, 1);  // [[1, 4], [2, 5], [3, 6]]
  check_close(vals(F::sum(x, 1)), {5, 7, 9});
  check_close(vals(F::max(x, 0)), {3, 6});
  check_close(vals(x * 2.0), {2, 8, 4, 10, 6, 12});
  check_close(vals(x + t({10, 20}, {2})), {11, 24, 12, 25, 13, 26});
  check_close(vals(F::exp(x.to(DType::bfloat16)) > 10.0), {0, 1, 0, 1, 1, 1});
  const auto n = mg::ones({4, 6}).narrow(1, 1, 3);
  check_close(vals(F::sum(n, 0)), {4, 4, 4});
}

BOOST_AUTO_TEST_CASE(large_elementwise_in_low_precision) {
  mg::manual_seed(5);
  const auto a = mg::uniform({200, 300}, -2, 2, DType::float16);
  const auto b = mg::uniform({300}, -2, 2, DType::float16);
  const auto y = F::tanh(a * b + 1.0);
  BOOST_TEST(y.dtype() == DType::float16);
  const auto va = vals(a), vb = vals(b), vy = vals(y);
  for (int64_t i = 0; i < 200; i += 37)
    for (int64_t j = 0; j < 300; j += 13) {
      // the product is rounded to float16 before the next op
      const double p = static_cast<float>(mg::half(static_cast<float>(va[i * 300 + j] * vb[j])));
      const double s = static_cast<float>(mg::half(static_cast<float>(p + 1.0)));
      BOOST_TEST(std::abs(vy[i * 300 + j] - std::tanh(s)) <= 1e-3);
    }
}

BOOST_AUTO_TEST_CASE(autocast_policies) {
  const auto h = mg::ones({2}, DType::bfloat16);
  const auto f = mg::ones({2}, DType::float32);
  const auto h16 = mg::ones({2}, DType::float16);
  {
    mg::amp::autocast scope;
    BOOST_TEST(F::add(h, f).dtype() == DType::float32);       // promote
    BOOST_TEST(F::add(h, h16).dtype() == DType::float32);     // promote
    BOOST_TEST(F::mul(h, h).dtype() == DType::bfloat16);      // promote, nothing to do
    BOOST_TEST(F::div(h, h).dtype() == DType::float32);       // high
    BOOST_TEST(F::exp(h).dtype() == DType::float32);          // high
    BOOST_TEST(F::relu(h).dtype() == DType::bfloat16);        // keep
    BOOST_TEST(F::sum(h).dtype() == DType::float32);          // high
    BOOST_TEST(F::max(h).dtype() == DType::bfloat16);         // keep
    BOOST_TEST(F::exp(mg::ones({2}, DType::float64)).dtype() == DType::float64);  // float64 is never cast
  }
  // Gradients reach a bfloat16 input in bfloat16 through the autocast casts,
  // also when backward runs inside the scope.
  const auto x = mg::tensor({0.5, 1.0}, {2}, DType::bfloat16);
  mg::autodiff::GradManager gm;
  gm.attach(x);
  {
    mg::amp::autocast scope;
    auto rec = gm.record();
    const auto y = F::sum(F::exp(x) / 2.0);
    BOOST_TEST(y.dtype() == DType::float32);
    gm.backward(y);
  }
  BOOST_TEST(x.grad().dtype() == DType::bfloat16);
  check_close(vals(x.grad()), {std::exp(0.5) / 2, std::exp(1.0) / 2}, 1e-2);
}

BOOST_AUTO_TEST_SUITE_END()
