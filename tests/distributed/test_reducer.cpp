// The gradient reducer's edge cases: a tensor without a gradient on some
// ranks, ranks whose first backward disagrees, and the GradScaler's
// found-inf flag agreed across ranks.
#include <cmath>
#include <limits>
#include <vector>

#include "../common/test_util.hpp"
#include "dist_util.hpp"

namespace mg = mixgrad;
namespace dist = mixgrad::distributed;
using dist_test::world;
using test_util::values;

namespace {

mg::Tensor param(std::vector<float> v) {
  return mg::tensor(v, mg::Shape{static_cast<int64_t>(v.size())});
}

// loss = sum(a * c_r) (+ sum(b * d) where use_b), c_r = (r + 1) * [1, 2, 3], d = [4, 5, 6].
void backward(mg::autodiff::GradManager& gm, const mg::Tensor& a, const mg::Tensor& b, bool use_b) {
  const float k = static_cast<float>(world().rank() + 1);
  auto rec = gm.record();
  mg::Tensor loss = mg::F::sum(a * param({k, 2 * k, 3 * k}));
  if (use_b) loss = loss + mg::F::sum(b * param({4, 5, 6}));
  gm.backward(loss);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(reducer)

BOOST_AUTO_TEST_CASE(tensor_without_gradient_on_some_ranks) {
  const int W = world().world_size();
  const double tri = W * (W + 1) / 2.0;
  mg::Tensor a = param({0, 0, 0}), b = param({0, 0, 0});
  mg::autodiff::GradManager gm;
  gm.attach({a, b}, {dist::make_allreduce_callback(gm, world(), "sum", {.bucket_bytes = 8})});
  backward(gm, a, b, true);  // the first backward lays the buckets out: every rank reaches both
  BOOST_TEST(values(a.grad()) == std::vector<double>({tri, 2 * tri, 3 * tri}), boost::test_tools::per_element());
  BOOST_TEST(values(b.grad()) == std::vector<double>({4.0 * W, 5.0 * W, 6.0 * W}), boost::test_tools::per_element());
  a.set_grad(mg::Tensor());
  b.set_grad(mg::Tensor());
  for (int round = 0; round < 2; ++round) {
    // Only rank 0 reaches b: the others contribute zeros and still get the sum.
    backward(gm, a, b, world().rank() == 0);
    BOOST_TEST(values(a.grad()) == std::vector<double>({tri, 2 * tri, 3 * tri}), boost::test_tools::per_element());
    BOOST_TEST_REQUIRE(b.grad().defined());
    BOOST_TEST(values(b.grad()) == std::vector<double>({4, 5, 6}), boost::test_tools::per_element());
    a.set_grad(mg::Tensor());
    b.set_grad(mg::Tensor());
  }
}

BOOST_AUTO_TEST_CASE(first_backward_must_agree) {
  if (world().world_size() < 2) return;
  mg::Tensor a = param({0, 0, 0}), b = param({0, 0, 0});
  mg::autodiff::GradManager gm;
  gm.attach({a, b}, {dist::make_allreduce_callback(gm, world(), "mean")});
  // Rank 0 reaches two tensors, the others one: every rank refuses, none hangs.
  test_util::check_error<mg::StateError>([&] { backward(gm, a, b, world().rank() == 0); },
                                         {"GradReducer", "first backward"});
  BOOST_TEST(!a.grad().defined());  // backward changed no .grad()
  BOOST_TEST(!b.grad().defined());
}

BOOST_AUTO_TEST_CASE(found_inf_agrees_across_ranks) {
  const int W = world().world_size();
  mg::Tensor a = param({1, 1, 1}), b = param({1, 1, 1});
  mg::autodiff::GradManager gm;
  gm.attach({a, b}, {dist::make_allreduce_callback(gm, world(), "mean")});
  mg::optim::SGD opt({a, b}, {.lr = 0.5});
  mg::amp::GradScaler scaler({.init_scale = 8.0, .growth_interval = 1});
  dist::sync_grad_scaler(world(), scaler);

  // Step 1: the last rank's reduced gradient overflows after the reduction
  // (as a local unscale can): only it sees inf, yet every rank must skip.
  {
    auto rec = gm.record();
    scaler.backward(gm, mg::F::sum(a * 2.0) + mg::F::sum(b), {},
        {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
  }
  if (world().rank() == W - 1) a.grad().data<float>()[1] = std::numeric_limits<float>::infinity();
  scaler.step(opt);
  scaler.update();
  BOOST_TEST(scaler.found_non_finite());
  BOOST_TEST(values(a) == std::vector<double>({1, 1, 1}), boost::test_tools::per_element());
  BOOST_TEST(values(b) == std::vector<double>({1, 1, 1}), boost::test_tools::per_element());
  BOOST_TEST(scaler.scale_factor() == 4.0);
  opt.clear_grad();

  // Step 2: clean everywhere: every rank steps and grows the scale alike.
  {
    auto rec = gm.record();
    scaler.backward(gm, mg::F::sum(a * 2.0) + mg::F::sum(b));  // unscale + update inside
  }
  scaler.step(opt);
  BOOST_TEST(!scaler.found_non_finite());
  BOOST_TEST(values(a) == std::vector<double>({0, 0, 0}), boost::test_tools::per_element());
  BOOST_TEST(values(b) == std::vector<double>({0.5, 0.5, 0.5}), boost::test_tools::per_element());
  BOOST_TEST(scaler.scale_factor() == 8.0);
  // The scales, gathered: identical on every rank.
  const auto scales = dist::all_gather(world(), mg::scalar(scaler.scale_factor(), mg::DType::float64));
  for (double s : values(scales)) BOOST_TEST(s == 8.0);
}

BOOST_AUTO_TEST_CASE(reducer_options_are_checked) {
  test_util::check_error<mg::ValueError>([] { dist::GradReducer(world(), "max"); }, {"mean", "sum"});
  test_util::check_error<mg::ValueError>([] { dist::GradReducer(world(), "mean", {.bucket_bytes = 0}); },
                                         {"bucket_bytes"});
}

BOOST_AUTO_TEST_SUITE_END()
