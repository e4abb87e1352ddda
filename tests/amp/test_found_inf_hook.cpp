// GradScaler::set_found_inf_hook: the hook sees the step's flag once per
// step, after its last unscale and before anything reads it, and what it
// writes there decides the step (data-parallel training all-reduces it).
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <vector>

#include "amp_test_util.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
using amptest::CountingOptimizer;
using amptest::param_with_grad;

BOOST_AUTO_TEST_SUITE(found_inf_hook)

BOOST_AUTO_TEST_CASE(hook_that_raises_the_flag_skips_the_step_and_backs_off) {
  mg::Tensor p = param_with_grad({8.0, 16.0}, mg::DType::float32);
  mg::optim::SGD opt({p}, {.lr = 1.0});
  mg::amp::GradScaler scaler({.init_scale = 8.0, .growth_interval = 1});
  std::vector<float> seen;
  scaler.set_found_inf_hook([&](const mg::Tensor& f) {
    seen.push_back(f.item<float>());
    mg::Tensor one = mg::ones({});
    std::memcpy(f.raw_data(), one.raw_data(), sizeof(float));  // "another rank overflowed"
  });
  scaler.unscale({p});
  scaler.step(opt);
  scaler.update();
  BOOST_TEST(seen == std::vector<float>({0.0f}));  // once, with the local (clean) flag
  BOOST_TEST(scaler.found_non_finite());
  BOOST_TEST(p.to_vector<double>() == std::vector<double>({0.0, 0.0}), boost::test_tools::per_element());
  BOOST_TEST(scaler.scale_factor() == 4.0);
}

BOOST_AUTO_TEST_CASE(hook_runs_once_per_step_and_again_after_a_later_unscale) {
  mg::Tensor a = param_with_grad({2.0}, mg::DType::float32), b = param_with_grad({4.0}, mg::DType::float32);
  mg::amp::GradScaler scaler({.init_scale = 2.0, .growth_interval = 1});
  int calls = 0;
  scaler.set_found_inf_hook([&](const mg::Tensor&) { ++calls; });
  scaler.update();  // no unscale yet: nothing to see
  BOOST_TEST(calls == 0);
  scaler.unscale({a});
  scaler.sync_found_inf();
  scaler.sync_found_inf();
  BOOST_TEST(calls == 1);
  scaler.unscale({b});  // the flag may have changed: seen again before the update
  scaler.update();
  BOOST_TEST(calls == 2);
  CountingOptimizer counting;
  scaler.step(counting);  // after update: the step's flag was already seen
  BOOST_TEST(calls == 2);
  BOOST_TEST(counting.steps == 1);
  BOOST_TEST(scaler.scale_factor() == 8.0);  // two clean updates: 2 -> 4 -> 8
}

BOOST_AUTO_TEST_CASE(disabled_scaler_never_calls_the_hook) {
  mg::Tensor p = param_with_grad({1.0}, mg::DType::float32);
  mg::amp::GradScaler scaler({.enabled = false});
  int calls = 0;
  scaler.set_found_inf_hook([&](const mg::Tensor&) { ++calls; });
  scaler.unscale({p});
  scaler.update();
  mg::optim::SGD opt({p}, {.lr = 1.0});
  scaler.step(opt);
  BOOST_TEST(calls == 0);
}

BOOST_AUTO_TEST_SUITE_END()
