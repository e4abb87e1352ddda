// Values and gradients of F::cumprod and F::cdist against PyTorch 2.15's
// torch.cumprod and torch.cdist: the expected numbers were printed by torch
// (float64, gradients by torch.autograd.grad) and are hard-coded. The op
// registry checks both against finite differences and in 16 bits
// (cases_cumprod.cpp, cases_einsum_cdist.cpp); the misuse rows are here.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "../common/test_util.hpp"

namespace {

namespace mg = mixgrad;
namespace F = mixgrad::F;
using test_util::check_error;
using test_util::values;

mg::Tensor t64(std::vector<double> v, mg::Shape s) { return mg::tensor(v, s, mg::DType::float64); }

void expect(const mg::Tensor& got, const std::vector<double>& want, double tol = 1e-5) {
  const auto v = values(got);
  BOOST_TEST_REQUIRE(v.size() == want.size());
  for (size_t i = 0; i < v.size(); ++i)
    BOOST_TEST(std::abs(v[i] - want[i]) <= tol * (1 + std::abs(want[i])), i << ": " << v[i] << " vs " << want[i]);
}

// The gradients of sum(f(inputs) * weight) (weight undefined: of sum(f)),
// taken on fresh copies of the inputs (a gradient accumulates on a tensor).
template <class Fn>
std::vector<mg::Tensor> grads(const std::vector<mg::Tensor>& originals, Fn f, const mg::Tensor& weight = mg::Tensor()) {
  std::vector<mg::Tensor> inputs;
  for (const auto& x : originals) inputs.push_back(mg::tensor(values(x), x.shape(), x.dtype()));
  mg::autodiff::GradManager gm;
  for (auto& x : inputs) gm.attach(x);
  {
    auto rec = gm.record();
    const mg::Tensor y = f(inputs);
    gm.backward(F::sum(weight.defined() ? F::mul(y, weight) : y));
  }
  std::vector<mg::Tensor> out;
  for (auto& x : inputs) out.push_back(x.grad());
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cumprod_cdist)

BOOST_AUTO_TEST_CASE(cumprod_values_and_gradient_through_zeros_match_torch) {
  const mg::Tensor x = t64({1.5, 0.0, 2.0, -1.0, 0.5, -2.0, 0.0, 0.0}, {2, 4});
  const mg::Tensor w = t64({1.0, 2.0, -1.0, 0.5, 2.0, 1.0, 3.0, -2.0}, {2, 4});
  expect(F::cumprod(x, 1), {1.5, 0, 0, 0, 0.5, -1, 0, 0});
  expect(F::cumprod(x, -2), {1.5, 0, 2, -1, 0.75, 0, 0, 0});
  expect(grads({x}, [](auto& in) { return F::cumprod(in[0], 1); }, w)[0], {1, -1.5, 0, 0, 0, 0.5, -3, 0});
  expect(grads({x}, [](auto& in) { return F::cumprod(in[0], 0); }, w)[0], {2, 0, -1, 0.5, 3, 0, 6, 2});
  expect(F::cumprod(t64({3.0}, {}), 0), {3.0});
}

BOOST_AUTO_TEST_CASE(cumprod_misuse_and_autocast) {
  check_error<mg::DTypeError>([] { F::cumprod(mg::tensor<int64_t>({1, 2}, {2}), 0); }, {"cumprod"});
  check_error<mg::ShapeError>([] { F::cumprod(mg::zeros({2, 3}), 2); }, {"cumprod"});
  mg::amp::autocast scope(true, mg::DType::bfloat16);
  BOOST_TEST(F::cumprod(mg::ones({2, 3}, mg::DType::bfloat16), 1).dtype() == mg::DType::float32);
}

BOOST_AUTO_TEST_CASE(cdist_values_and_gradients_match_torch_for_every_p) {
  using M = F::CdistMode;
  const mg::Tensor x1 = t64({0.0, 1.0, 2.0, 1.0, -1.0, 0.5, 2.0, 0.0, 0.0}, {3, 3});
  const mg::Tensor x2 = t64({0.0, 1.0, 2.0, 3.0, 1.0, -1.0}, {2, 3});
  struct Row {
    double p;
    std::vector<double> d, g1, g2;
  };
  // x1's row 0 equals x2's row 0: a zero distance, whose gradient is 0.
  const std::vector<Row> rows{
      {2.0, {0, 4.24264, 2.69258, 3.20156, 3, 1.73205},
       {-0.707107, 0, 0.707107, -0.253304, -1.36748, -0.0885647, 0.0893164, -0.910684, -0.0893164},
       {-1.03806, 1.07611, 1.22375, 1.90915, 1.20205, -1.75298}},
      {1.0, {0, 6, 4.5, 5.5, 5, 3}, {-1, 0, 1, 0, -2, 0, 0, -2, 0}, {-2, 2, 2, 3, 2, -3}},
      {0.5, {0, 12, 13.242, 16.4282, 14.6569, 9},
       {-2, 0, 2, 0.772933, -5.43916, 0.338204, -0.292893, -6.82843, 0.292893},
       {-6.34607, 6.40156, 5.6783, 7.86603, 5.86603, -8.3094}},
      {3.0, {0, 3.77976, 2.31303, 2.68584, 2.57128, 1.44225},
       {-0.629961, 0, 0.629961, -0.367585, -1.30214, -0.108647, 0.124258, -0.632002, -0.124258},
       {-0.791919, 0.898899, 1.02556, 1.66521, 1.03525, -1.42261}},
  };
  for (const Row& r : rows) {
    for (M mode : {M::use_mm_for_euclid_dist, M::donot_use_mm_for_euclid_dist}) {
      BOOST_TEST_CONTEXT("p = " << r.p << ", mode " << static_cast<int>(mode)) {
        expect(F::cdist(x1, x2, r.p, mode), r.d);
        const auto g = grads({x1, x2}, [&](auto& in) { return F::cdist(in[0], in[1], r.p, mode); });
        expect(g[0], r.g1);
        expect(g[1], r.g2);
      }
    }
  }
  expect(F::cdist(x1, x2, std::numeric_limits<double>::infinity()), {0, 3, 2, 2, 2, 1});
  expect(F::cdist(x1, x2, 0.0), {0, 2, 3, 3, 3, 3});
}

// d/dx1 of sum(d/dx1 sum(cdist)) with x2 a constant, against torch's double
// backward of its p = 2 matrix-product path (no zero distance here, where
// both of mixgrad's paths have the same second derivative).
BOOST_AUTO_TEST_CASE(cdist_second_derivative_with_a_constant_x2_matches_torch) {
  for (auto mode : {F::CdistMode::use_mm_for_euclid_dist, F::CdistMode::donot_use_mm_for_euclid_dist}) {
    mg::Tensor x1 = t64({0.0, 1.0, 2.0, 1.0, -1.0, 0.5, 2.0, 0.0, 0.0}, {3, 3});
    const mg::Tensor x2 = t64({0.5, 1.0, 2.0, 3.0, 1.0, -1.0}, {2, 3});
    mg::autodiff::GradManager gm;
    gm.attach(x1);
    auto rec = gm.record();
    gm.backward(F::sum(F::cdist(x1, x2, 2.0, mode)), {}, {.create_graph = true});
    const mg::Tensor g = x1.grad();
    expect(g, {-1.70711, 0, 0.707107, -0.428579, -1.40916, -0.119827, -0.0202643, -0.948741, -0.165431});
    x1.set_grad({});
    gm.backward(F::sum(g));
    expect(x1.grad(), {0.235702, 2.2357, 2.2357, 0.64273, 0.190155, 0.547308, 0.87155, 0.679451, 0.987512});
  }
}

BOOST_AUTO_TEST_CASE(cdist_broadcasts_batch_dims_and_picks_the_product_for_many_rows) {
  const mg::Tensor a = test_util::randn({2, 1, 30, 3}, 1), b = test_util::randn({3, 4, 3}, 2);
  const mg::Tensor by_mm = F::cdist(a, b);  // 30 rows > 25: the matrix product
  BOOST_TEST(mg::to_string(by_mm.shape()) == "[2, 3, 30, 4]");
  test_util::check_close(by_mm, F::cdist(a, b, 2.0, F::CdistMode::donot_use_mm_for_euclid_dist), 1e-4);
}

BOOST_AUTO_TEST_CASE(cdist_misuse_and_autocast) {
  check_error<mg::ShapeError>([] { F::cdist(mg::zeros({3}), mg::zeros({2, 3})); }, {"cdist", "2 dims", "[3]"});
  check_error<mg::ShapeError>([] { F::cdist(mg::zeros({2, 3}), mg::zeros({2, 4})); }, {"cdist", "columns", "[2, 4]"});
  check_error<mg::ShapeError>([] { F::cdist(mg::zeros({2, 2, 3}), mg::zeros({3, 2, 3})); }, {"cdist"});
  check_error<mg::ValueError>([] { F::cdist(mg::zeros({2, 3}), mg::zeros({2, 3}), -1.0); }, {"cdist", "p must be"});
  check_error<mg::DTypeError>([] { F::cdist(mg::zeros({2, 3}), mg::zeros({2, 3}, mg::DType::float64)); },
                              {"cdist", "dtypes differ"});
  mg::amp::autocast scope(true, mg::DType::bfloat16);
  BOOST_TEST(F::cdist(mg::ones({2, 3}, mg::DType::bfloat16), mg::ones({2, 3})).dtype() == mg::DType::float32);
}

BOOST_AUTO_TEST_SUITE_END()
