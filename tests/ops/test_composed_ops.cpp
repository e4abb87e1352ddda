// Values of the ops composed of F:: ops (addmm, baddbmm, addbmm, prelu and
// nn::PReLU, the losses of src/ops/loss_composed.cpp) from their PyTorch
// definitions, worked out by hand here; the op registry checks their
// gradients, 16-bit results and autocast entries.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "../common/test_util.hpp"

namespace {

namespace mg = mixgrad;
namespace F = mixgrad::F;
namespace tt = boost::test_tools;
using mg::Reduction;
using test_util::values;

mg::Tensor t(std::vector<double> v, mg::Shape s) { return mg::tensor(v, s, mg::DType::float32); }

void expect(const mg::Tensor& got, const std::vector<double>& want, double tol = 1e-5) {
  const auto v = values(got);
  BOOST_TEST_REQUIRE(v.size() == want.size());
  for (size_t i = 0; i < v.size(); ++i) BOOST_TEST(std::abs(v[i] - want[i]) <= tol, i << ": " << v[i] << " vs " << want[i]);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(composed_ops)

BOOST_AUTO_TEST_CASE(addmm_scales_a_broadcast_input_and_the_product) {
  const mg::Tensor a = t({1, 2, 3, 4}, {2, 2}), eye = t({1, 0, 0, 1}, {2, 2});
  expect(F::addmm(t({1, 2}, {2}), a, eye, {.beta = 0.5, .alpha = 2.0}), {2.5, 5, 6.5, 9});
  // beta 0 ignores input: its NaN does not reach the result.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  expect(F::addmm(t({nan}, {1}), a, eye, {.beta = 0.0}), {1, 2, 3, 4});
}

BOOST_AUTO_TEST_CASE(baddbmm_and_addbmm_match_their_matmuls) {
  mg::manual_seed(3);
  const mg::Tensor b1 = mg::normal({3, 2, 4}), b2 = mg::normal({3, 4, 5}), c = mg::normal({2, 5});
  const mg::Tensor prod = F::matmul(b1, b2);
  expect(F::baddbmm(c, b1, b2, {.beta = 2.0, .alpha = 0.5}), values(F::add(F::mul(c, 2.0), F::mul(prod, 0.5))));
  expect(F::addbmm(c, b1, b2), values(F::add(c, F::sum(prod, {0}))));
}

BOOST_AUTO_TEST_CASE(addmm_runs_in_low_precision_and_losses_in_float32_under_autocast) {
  mg::amp::autocast scope(true, mg::DType::bfloat16);
  const mg::Tensor y = F::addmm(mg::ones({2}), mg::ones({2, 3}), mg::ones({3, 2}));
  BOOST_TEST(y.dtype() == mg::DType::bfloat16);
  BOOST_TEST(F::prelu(mg::ones({2, 3}), mg::ones({3})).dtype() == mg::DType::bfloat16);
  BOOST_TEST(F::smooth_l1_loss(y, mg::zeros({2, 2}, mg::DType::bfloat16)).dtype() == mg::DType::float32);
  // binary_cross_entropy is refused only for CUDA inputs; on the CPU it runs in float32.
  BOOST_TEST(F::binary_cross_entropy(mg::full({2}, 0.5, mg::DType::bfloat16), mg::ones({2})).dtype() ==
             mg::DType::float32);
}

BOOST_AUTO_TEST_CASE(prelu_per_channel_and_the_module) {
  const mg::Tensor x = t({-1, 2, -4, 3}, {1, 2, 2});
  expect(F::prelu(x, t({0.25, 0.5}, {2})), {-0.25, 2, -2, 3});
  expect(F::prelu(x, t({0.1}, {1})), {-0.1, 2, -0.4, 3});
  mg::nn::PReLU one, per_channel(2, 0.5);
  expect(one(x), {-0.25, 2, -1, 3});
  expect(per_channel(x), {-0.5, 2, -2, 3});
  BOOST_TEST(per_channel.parameters().size() == 1u);
  BOOST_TEST(per_channel.named_parameters()[0].first == "weight");
  BOOST_TEST(per_channel.describe() == "PReLU(num_parameters=2)");
}

BOOST_AUTO_TEST_CASE(smooth_l1_and_huber) {
  const mg::Tensor p = t({0.5, 2, -3}, {3}), z = mg::zeros({3});
  const auto none = Reduction::none;
  expect(F::smooth_l1_loss(p, z, {.reduction = none}), {0.125, 1.5, 2.5});
  expect(F::smooth_l1_loss(p, z, {.reduction = none, .beta = 0.0}), {0.5, 2, 3});  // l1
  expect(F::smooth_l1_loss(p, z), {(0.125 + 1.5 + 2.5) / 3});
  expect(F::huber_loss(p, z, {.reduction = none, .delta = 2.0}), {0.125, 2, 4});
}

BOOST_AUTO_TEST_CASE(binary_cross_entropy_clamps_its_logs_and_weighs) {
  const mg::Tensor p = t({0.8, 0.0, 0.3}, {3}), y = t({1, 1, 0}, {3});
  expect(F::binary_cross_entropy(p, y, {.reduction = Reduction::none}), {-std::log(0.8), 100, -std::log(0.7)});
  expect(F::binary_cross_entropy(p, y, {.reduction = Reduction::sum, .weight = t({2, 0, 1}, {3})}),
         {-2 * std::log(0.8) - std::log(0.7)});
}

BOOST_AUTO_TEST_CASE(poisson_nll_loss_log_input_rate_and_stirling) {
  const auto none = Reduction::none;
  expect(F::poisson_nll_loss(t({0.5}, {1}), t({2}, {1}), {.reduction = none}), {std::exp(0.5) - 1});
  const double stirling = 2 * std::log(2.0) - 2 + 0.5 * std::log(4 * std::numbers::pi);
  expect(F::poisson_nll_loss(t({0.5, 0.5}, {2}), t({2, 1}, {2}), {.reduction = none, .full = true}),
         {std::exp(0.5) - 1 + stirling, std::exp(0.5) - 0.5});
  expect(F::poisson_nll_loss(t({2}, {1}), t({3}, {1}), {.reduction = none, .log_input = false}),
         {2 - 3 * std::log(2 + 1e-8)});
}

BOOST_AUTO_TEST_CASE(kl_div_with_zero_targets_log_targets_and_batchmean) {
  const mg::Tensor x = t({-1, -2, -0.5, -3}, {2, 2}), y = t({0, 0.5, 0.25, 1}, {2, 2});
  const std::vector<double> each{0, 0.5 * (std::log(0.5) + 2), 0.25 * (std::log(0.25) + 0.5), 3};
  expect(F::kl_div(x, y, {.reduction = Reduction::none}), each);
  expect(F::kl_div(x, y, {.batchmean = true}), {(each[1] + each[2] + each[3]) / 2});
  expect(F::kl_div(x, F::log(t({0.5, 0.5, 0.25, 1}, {2, 2})), {.reduction = Reduction::sum, .log_target = true}),
         {0.5 * (std::log(0.5) + 1) + 0.5 * (std::log(0.5) + 2) + each[2] + each[3]});
}

BOOST_AUTO_TEST_CASE(margin_losses) {
  const auto none = Reduction::none;
  expect(F::soft_margin_loss(t({0, 2}, {2}), t({1, -1}, {2}), {.reduction = none}), {std::log(2.0), std::log1p(std::exp(2.0))});
  expect(F::margin_ranking_loss(t({1, 3}, {2}), t({2, 1}, {2}), t({1, 1}, {2}), {.reduction = none, .margin = 0.5}),
         {1.5, 0});
  expect(F::hinge_embedding_loss(t({0.3, 0.3, 2}, {3}), t({1, -1, -1}, {3}), {.reduction = none}), {0.3, 0.7, 0});
  const mg::Tensor e1 = t({1, 0, 1, 0}, {2, 2}), e2 = t({0, 1, 0, 1}, {2, 2});
  expect(F::cosine_embedding_loss(e1, e2, t({1, -1}, {2}), {.reduction = none, .margin = -0.5}), {1, 0.5});
}

BOOST_AUTO_TEST_CASE(multi_margin_loss_sums_the_other_classes_over_c) {
  const mg::Tensor x = t({0.1, 0.2, 0.4, 0.8, 0.1, 0.5}, {2, 3});
  const mg::Tensor y = mg::tensor<int64_t>({0, 2}, {2});
  // Sample 0 (y = 0): 1 - 0.1 + 0.2 and 1 - 0.1 + 0.4; sample 1 (y = 2): 1 - 0.5 + 0.8, 1 - 0.5 + 0.1.
  expect(F::multi_margin_loss(x, y, {.reduction = Reduction::none}), {(1.1 + 1.3) / 3, (1.3 + 0.6) / 3});
  expect(F::multi_margin_loss(x, y, {.reduction = Reduction::none, .p = 2, .weight = t({2, 1, 0.5}, {3})}),
         {2 * (1.21 + 1.69) / 3, 0.5 * (1.69 + 0.36) / 3});
}

BOOST_AUTO_TEST_CASE(triplet_margin_loss_with_and_without_swap) {
  const mg::Tensor a = t({0, 0}, {2}), p = t({3, 4}, {2}), n = t({3, 3}, {2});
  expect(F::triplet_margin_loss(a, p, n, {.eps = 0.0}), {5 - std::sqrt(18.0) + 1});
  expect(F::triplet_margin_loss(a, p, n, {.eps = 0.0, .swap = true}), {5 - 1 + 1.0});
  expect(F::triplet_margin_loss(a, p, n, {.p = 1.0, .eps = 0.0}), {7 - 6 + 1.0});
}

BOOST_AUTO_TEST_SUITE_END()
