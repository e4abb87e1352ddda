// GradScaler: settings, the manual gear (unscale / update / step), state
// dicts, and the rule that a throwing call changes nothing. The automatic
// gear is in test_scaler_backward.cpp.
#include <boost/test/unit_test.hpp>

#include <cfloat>
#include <cmath>
#include <limits>

#include "amp_test_util.hpp"

namespace mg = mixgrad;
using amptest::CountingOptimizer;
using amptest::from_map;
using amptest::param_with_grad;
using amptest::same_state;
using amptest::to_map;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// inf or NaN in a float32, float16 or bfloat16 gradient: the grads are kept
// (unscaled), the optimizer step is skipped (a mixgrad optimizer by the flag
// on the device, any other from the host), the scale halves and the growth
// count restarts.
void check_non_finite_step(mg::DType dt, double bad) {
  mg::amp::GradScaler s({.init_scale = 64.0, .growth_interval = 10});
  for (int i = 0; i < 4; ++i) s.update();  // four clean steps counted
  BOOST_TEST(s.growth_tracker() == 4);
  mg::Tensor clean = param_with_grad({1.0, 2.0}, mg::DType::float32);
  mg::Tensor dirty = param_with_grad({3.0, bad, 5.0}, dt);
  mg::Tensor also_clean = param_with_grad({6.0}, dt);
  s.unscale({clean, dirty, also_clean});
  BOOST_TEST(s.found_non_finite());
  BOOST_TEST(clean.grad().to_vector<float>() == std::vector<float>({1.f / 64, 2.f / 64}), boost::test_tools::per_element());
  BOOST_TEST(also_clean.grad().to_vector<double>()[0] == 6.0 / 64);
  mg::optim::SGD sgd({clean, dirty, also_clean}, {.lr = 1.0, .momentum = 0.9});
  const auto params_before = std::vector{clean.to_vector<double>(), dirty.to_vector<double>(), also_clean.to_vector<double>()};
  sgd.step();  // MegEngine's opt.step(): skipped on the device
  s.step(sgd);
  BOOST_TEST((std::vector{clean.to_vector<double>(), dirty.to_vector<double>(), also_clean.to_vector<double>()} ==
              params_before));
  for (size_t i = 0; i < 3; ++i) BOOST_TEST(sgd.step_count(i) == 0);
  BOOST_TEST(sgd.state_dict().size() == 5u);  // options only: no parameter state
  CountingOptimizer opt;
  s.step(opt);
  BOOST_TEST(opt.steps == 0);
  s.update();
  BOOST_TEST(s.scale_factor() == 32.0);
  BOOST_TEST(s.growth_tracker() == 0);
  s.step(opt);  // still the overflowed step until the next unscale
  BOOST_TEST(opt.steps == 0);
  sgd.step();  // the grads still carry their step's flag
  BOOST_TEST(sgd.step_count(0) == 0);
  mg::Tensor next = param_with_grad({2.0}, mg::DType::float32);
  s.unscale({next});
  BOOST_TEST(!s.found_non_finite());
  s.step(opt);
  BOOST_TEST(opt.steps == 1);
  // A clean step of the same parameters is taken.
  clean.set_grad(mg::tensor({32.f, 64.f}, {2}));
  s.unscale({clean});
  s.step(sgd);
  BOOST_TEST(sgd.step_count(0) == 1);
  BOOST_TEST(clean.to_vector<float>() == std::vector<float>({-1.f, -2.f}), boost::test_tools::per_element());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(grad_scaler)

BOOST_AUTO_TEST_CASE(defaults_are_megengines_plus_a_floor) {
  mg::amp::GradScaler s;
  BOOST_TEST(s.scale_factor() == 16.0);
  BOOST_TEST(s.options().growth_factor == 2.0);
  BOOST_TEST(s.options().backoff_factor == 0.5);
  BOOST_TEST(s.options().growth_interval == 2000);
  BOOST_TEST(s.options().min_scale.value() == 0x1p-14);
  BOOST_TEST(!s.options().max_scale.has_value());
  BOOST_TEST(s.growth_tracker() == 0);
  BOOST_TEST(!s.found_non_finite());

  mg::amp::GradScaler positional(8.0, 3.0, 0.25, 7);  // MegEngine's argument order
  BOOST_TEST(positional.scale_factor() == 8.0);
  BOOST_TEST(positional.options().growth_factor == 3.0);
  BOOST_TEST(positional.options().backoff_factor == 0.25);
  BOOST_TEST(positional.options().growth_interval == 7);
  BOOST_TEST(positional.options().min_scale.value() == 0x1p-14);

  mg::amp::GradScaler designated({.init_scale = 4.0, .growth_interval = 5, .max_scale = 64.0});
  BOOST_TEST(designated.scale_factor() == 4.0);
  BOOST_TEST(designated.options().growth_interval == 5);
  BOOST_TEST(designated.options().max_scale.value() == 64.0);
}

BOOST_AUTO_TEST_CASE(invalid_settings_throw) {
  using O = mg::amp::GradScalerOptions;
  const std::vector<O> bad = {
      {.init_scale = 0.0},           {.init_scale = -1.0},          {.init_scale = kInf},
      {.init_scale = kNaN},          {.growth_factor = 1.0},        {.growth_factor = 0.5},
      {.growth_factor = kInf},       {.growth_factor = kNaN},       {.backoff_factor = 0.0},
      {.backoff_factor = 1.0},       {.backoff_factor = 1.5},       {.backoff_factor = kNaN},
      {.growth_interval = -1},       {.min_scale = 0.0},            {.min_scale = kNaN},
      {.max_scale = kInf},           {.max_scale = -2.0},           {.min_scale = 8.0, .max_scale = 4.0},
      {.init_scale = 2.0, .min_scale = 4.0}, {.init_scale = 32.0, .max_scale = 16.0},
      // Outside [2^-126, 2^126], where the scale or its reciprocal is not a
      // finite, normal float32 number.
      {.init_scale = 0x1p127},       {.init_scale = 1.6e39},        {.init_scale = DBL_MAX},
      {.init_scale = 0x1p-127, .min_scale = std::nullopt},
      {.init_scale = 2.9e-39, .min_scale = std::nullopt},
      {.init_scale = std::numeric_limits<double>::denorm_min(), .min_scale = std::nullopt},
      {.min_scale = 0x1p-127},       {.min_scale = 1e-300},         {.max_scale = 0x1p127},
      {.max_scale = 1e300},          {.init_scale = 1e-5},  // below the default min_scale 2^-14
  };
  for (const O& o : bad) BOOST_CHECK_THROW(mg::amp::GradScaler{o}, mg::ValueError);
  BOOST_CHECK_THROW(mg::amp::GradScaler(-4.0), mg::ValueError);
  BOOST_CHECK_THROW(mg::amp::GradScaler(4.0, 1.0), mg::ValueError);
  BOOST_CHECK_THROW(mg::amp::GradScaler(4.0, 2.0, 0.5, -3), mg::ValueError);
  BOOST_CHECK_NO_THROW(mg::amp::GradScaler({.init_scale = 4.0, .min_scale = 4.0, .max_scale = 4.0}));
  BOOST_CHECK_NO_THROW(mg::amp::GradScaler({.growth_interval = 0}));
  BOOST_CHECK_THROW(mg::amp::GradScaler(1e-5), mg::ValueError);  // the positional form has the floor too
  BOOST_CHECK_THROW(mg::amp::GradScaler(1e39), mg::ValueError);
  // The limits themselves are valid.
  BOOST_CHECK_NO_THROW(mg::amp::GradScaler({.init_scale = 0x1p126}));
  BOOST_CHECK_NO_THROW(mg::amp::GradScaler({.init_scale = 0x1p-14}));
  BOOST_CHECK_NO_THROW(mg::amp::GradScaler({.init_scale = 0x1p-126, .min_scale = std::nullopt}));
  BOOST_CHECK_NO_THROW(mg::amp::GradScaler({.init_scale = 1.0, .min_scale = 0x1p-126, .max_scale = 0x1p126}));
  BOOST_TEST(mg::amp::kMinScaleLimit == 0x1p-126);
  BOOST_TEST(mg::amp::kMaxScaleLimit == 0x1p126);
  BOOST_TEST(mg::amp::kDefaultMinScale == 0x1p-14);
}

BOOST_AUTO_TEST_CASE(unscale_divides_by_the_scale_in_float_and_double) {
  mg::amp::GradScaler s(3.0);  // not a power of two: the rounding of 1/3 shows
  const std::vector<double> g = {1.0, -2.5, 3.0e-3, 7.0e5, 0.0, -1.0e-30};
  mg::Tensor p32 = param_with_grad(g, mg::DType::float32);
  mg::Tensor p64 = param_with_grad(g, mg::DType::float64);
  mg::Tensor none = mg::zeros({3});  // no grad: skipped
  const uint64_t version = p32.grad().version();
  s.unscale({p32, none, mg::Tensor(), p64});
  BOOST_TEST(p32.grad().version() > version);  // an in-place write, for value caches
  BOOST_TEST(!s.found_non_finite());
  BOOST_TEST(!none.grad().defined());
  const float inv_f = static_cast<float>(1.0 / 3.0);
  const auto got32 = p32.grad().to_vector<float>();
  const auto got64 = p64.grad().to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    BOOST_TEST(got32[i] == static_cast<float>(g[i]) * inv_f);
    BOOST_TEST(got64[i] == g[i] * (1.0 / 3.0));
  }
  // float64 grads really are scaled in double: 1/3 rounded to float differs.
  BOOST_TEST(got64[0] != static_cast<double>(inv_f));
}

BOOST_AUTO_TEST_CASE(unscale_low_precision_grads) {
  for (mg::DType dt : {mg::DType::float16, mg::DType::bfloat16}) {
    mg::amp::GradScaler s(1024.0);
    const std::vector<double> g = {1024.0, -3072.0, 0.5, 4096.0, -0.125};
    mg::Tensor p = param_with_grad(g, dt);
    s.unscale({p});
    BOOST_TEST(!s.found_non_finite());
    BOOST_TEST(p.grad().dtype() == dt);
    const auto got = p.grad().to_vector<double>();
    for (size_t i = 0; i < g.size(); ++i) BOOST_TEST(got[i] == g[i] / 1024.0);  // exact: powers of two
  }
}

// Upstream: PyTorch test_cuda.py / test_torch.py test_grad_scaling_unscale (ported in full in test_upstream_scaler.cpp).
BOOST_AUTO_TEST_CASE(unscale_strided_shared_and_repeated_grads_once) {
  mg::amp::GradScaler s(4.0);
  mg::Tensor p = mg::zeros({3, 2});
  mg::Tensor base = mg::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  p.set_grad(mg::F::transpose(base, 0, 1));  // a non-contiguous grad
  mg::Tensor q = param_with_grad({8.0, 16.0}, mg::DType::float32);
  mg::Tensor r = mg::zeros({2});
  r.set_grad(q.grad());  // two tensors, one gradient
  s.unscale({p, q, p, r});
  BOOST_TEST(base.to_vector<float>() == std::vector<float>({0.25f, 0.5f, 0.75f, 1.f, 1.25f, 1.5f}),
             boost::test_tools::per_element());
  BOOST_TEST(q.grad().to_vector<float>() == std::vector<float>({2.f, 4.f}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(non_finite_grads_skip_and_back_off) {
  for (mg::DType dt : {mg::DType::float32, mg::DType::float16, mg::DType::bfloat16}) {
    for (double bad : {kInf, -kInf, kNaN}) {
      BOOST_TEST_CONTEXT(dt << " grad holding " << bad) { check_non_finite_step(dt, bad); }
    }
  }
}

BOOST_AUTO_TEST_CASE(overflow_caused_by_unscaling_is_found) {
  // A scale below one multiplies: 60000 * 2 does not fit in float16.
  mg::amp::GradScaler s({.init_scale = 0.5});
  mg::Tensor p = param_with_grad({60000.0, 1.0}, mg::DType::float16);
  s.unscale({p});
  BOOST_TEST(s.found_non_finite());
  BOOST_TEST(std::isinf(p.grad().to_vector<float>()[0]));
}

BOOST_AUTO_TEST_CASE(overflow_in_a_later_range_skips_the_whole_step) {
  mg::amp::GradScaler s(2.0);
  mg::Tensor a = param_with_grad({2.0}, mg::DType::float32);
  mg::Tensor b = param_with_grad({kInf}, mg::DType::float32);
  mg::Tensor c = param_with_grad({4.0}, mg::DType::float32);
  mg::optim::SGD opt({a, b, c}, {.lr = 1.0});
  s.unscale({a});
  BOOST_TEST(a.grad().item<float>() == 1.f);
  BOOST_TEST(!s.found_non_finite());
  s.unscale({b});
  BOOST_TEST(s.found_non_finite());
  s.unscale({c});  // the step has overflowed already
  BOOST_TEST(c.grad().item<float>() == 2.f);
  BOOST_TEST(s.found_non_finite());
  opt.step();  // a, unscaled before the overflow was found, is skipped too
  BOOST_TEST(a.item<float>() == 0.f);
  BOOST_TEST(c.item<float>() == 0.f);
  BOOST_TEST(opt.step_count(0) == 0);
  s.update();
  BOOST_TEST(s.scale_factor() == 1.0);
}

BOOST_AUTO_TEST_CASE(unscale_takes_any_range_once) {
  mg::amp::GradScaler s(2.0);
  mg::Tensor a = param_with_grad({8.0}, mg::DType::float32);
  mg::Tensor b = param_with_grad({16.0}, mg::DType::float32);
  s.unscale({a});
  s.unscale({b});  // another range of the same step: fine
  const auto before = s.state_dict();
  BOOST_CHECK_THROW(s.unscale({b}), mg::StateError);
  BOOST_CHECK_THROW(s.unscale({a, b}), mg::StateError);
  BOOST_TEST(a.grad().item<float>() == 4.f);  // not divided twice
  BOOST_TEST(b.grad().item<float>() == 8.f);
  BOOST_TEST(same_state(s.state_dict(), before));
  // In a new step too: gradients left over from an earlier step hold
  // unscaled values, and dividing them again would be a silent error.
  s.update();
  const auto after_update = s.state_dict();
  BOOST_CHECK_THROW(s.unscale({a, b}), mg::StateError);
  BOOST_TEST(a.grad().item<float>() == 4.f);
  BOOST_TEST(b.grad().item<float>() == 8.f);
  BOOST_TEST(same_state(s.state_dict(), after_update));
  // Fresh gradients (set by hand: the caller says they are scaled) unscale.
  a.set_grad(mg::tensor({8.f}, {1}));
  s.unscale({a});
  BOOST_TEST(a.grad().item<float>() == 4.f);
}

// Upstream: PyTorch test_cuda.py / test_torch.py test_grad_scaling_update_scale (its values: test_upstream_scaler.cpp).
BOOST_AUTO_TEST_CASE(growth_after_exactly_growth_interval_clean_steps) {
  mg::amp::GradScaler s({.init_scale = 16.0, .growth_interval = 3});
  mg::Tensor p = param_with_grad({1.0}, mg::DType::float32);
  auto clean_step = [&] {
    p.set_grad(mg::tensor({1.f}, {1}));
    s.unscale({p});
    s.update();
  };
  clean_step();
  clean_step();
  BOOST_TEST(s.scale_factor() == 16.0);  // not one step early
  BOOST_TEST(s.growth_tracker() == 2);
  clean_step();
  BOOST_TEST(s.scale_factor() == 32.0);
  BOOST_TEST(s.growth_tracker() == 0);
  clean_step();
  clean_step();
  p.set_grad(mg::tensor({kInf}, {1}, mg::DType::float32));  // an overflow restarts the count
  s.unscale({p});
  s.update();
  BOOST_TEST(s.scale_factor() == 16.0);
  clean_step();
  clean_step();
  BOOST_TEST(s.scale_factor() == 16.0);
  clean_step();
  BOOST_TEST(s.scale_factor() == 32.0);
}

BOOST_AUTO_TEST_CASE(static_scale_never_changes_but_still_skips_overflow) {
  mg::amp::GradScaler s({.init_scale = 128.0, .growth_interval = 0});
  for (int i = 0; i < 5; ++i) s.update();
  BOOST_TEST(s.scale_factor() == 128.0);
  mg::Tensor p = param_with_grad({kNaN}, mg::DType::float32);
  s.unscale({p});
  BOOST_TEST(s.found_non_finite());
  CountingOptimizer opt;
  s.step(opt);
  BOOST_TEST(opt.steps == 0);
  mg::optim::Adam adam({p});
  s.step(adam);
  BOOST_TEST(p.item<float>() == 0.f);
  BOOST_TEST(adam.step_count(0) == 0);
  s.update();
  BOOST_TEST(s.scale_factor() == 128.0);
  BOOST_TEST(s.growth_tracker() == 0);
}

BOOST_AUTO_TEST_CASE(new_scale_always_wins) {
  mg::amp::GradScaler fixed({.init_scale = 128.0, .growth_interval = 0});
  fixed.update(512.0);  // MegEngine ignores it here; mixgrad applies it
  BOOST_TEST(fixed.scale_factor() == 512.0);

  mg::amp::GradScaler dynamic({.init_scale = 128.0, .growth_interval = 1});
  mg::Tensor p = param_with_grad({kInf}, mg::DType::float32);
  dynamic.unscale({p});
  dynamic.update(1000.0);  // wins over the backoff the overflow would cause
  BOOST_TEST(dynamic.scale_factor() == 1000.0);
  dynamic.update(3.0);  // and over the growth a clean step would cause
  BOOST_TEST(dynamic.scale_factor() == 3.0);

  mg::amp::GradScaler bounded({.init_scale = 8.0, .min_scale = 2.0, .max_scale = 64.0});
  const auto before = bounded.state_dict();
  for (double bad : {0.0, -1.0, kInf, kNaN, 1.0, 128.0}) BOOST_CHECK_THROW(bounded.update(bad), mg::ValueError);
  BOOST_TEST(same_state(bounded.state_dict(), before));

  // Without bounds, the limits still hold; the default floor holds too.
  mg::amp::GradScaler unbounded({.init_scale = 8.0, .growth_interval = 1, .min_scale = std::nullopt});
  const auto unbounded_before = unbounded.state_dict();
  for (double bad : {0x1p127, 1.6e39, DBL_MAX, 0x1p-127, 2.9e-39, 4.9e-324})
    BOOST_CHECK_THROW(unbounded.update(bad), mg::ValueError);
  BOOST_TEST(same_state(unbounded.state_dict(), unbounded_before));
  unbounded.update(0x1p-126);
  BOOST_TEST(unbounded.scale_factor() == 0x1p-126);
  unbounded.update(0x1p126);
  BOOST_TEST(unbounded.scale_factor() == 0x1p126);
  mg::amp::GradScaler floored;
  BOOST_CHECK_THROW(floored.update(0x1p-15), mg::ValueError);
  BOOST_TEST(floored.scale_factor() == 16.0);
  bounded.update(64.0);
  BOOST_TEST(bounded.scale_factor() == 64.0);
}

BOOST_AUTO_TEST_CASE(max_and_min_scale_clamp) {
  mg::amp::GradScaler up({.init_scale = 16.0, .growth_interval = 1, .max_scale = 40.0});
  up.update();
  BOOST_TEST(up.scale_factor() == 32.0);
  up.update();
  BOOST_TEST(up.scale_factor() == 40.0);
  up.update();
  BOOST_TEST(up.scale_factor() == 40.0);

  mg::amp::GradScaler down({.init_scale = 16.0, .growth_interval = 1, .min_scale = 5.0});
  for (double expected : {8.0, 5.0, 5.0}) {
    mg::Tensor p = param_with_grad({kInf}, mg::DType::float32);
    down.unscale({p});
    down.update();
    BOOST_TEST(down.scale_factor() == expected);
  }
}

BOOST_AUTO_TEST_CASE(growth_stops_at_2_to_the_126) {
  // Growing every step from 2^120: 2^126 is reached and kept. Doubling it
  // once more (2^127) would still be a float32, but twice (2^128, what
  // the old rule let through up to double's range) is inf as a float32 dy.
  mg::amp::GradScaler s({.init_scale = 0x1p120, .growth_interval = 1});
  for (int i = 0; i < 10; ++i) s.update();
  BOOST_TEST(s.scale_factor() == 0x1p126);
  BOOST_TEST(std::isfinite(static_cast<float>(s.scale_factor())));
  BOOST_TEST(std::isnormal(static_cast<float>(1.0 / s.scale_factor())));
  // A scale that is not a power of two lands on the limit, never above.
  mg::amp::GradScaler odd({.init_scale = 0x1p126 / 1.5, .growth_interval = 1});
  odd.update();
  BOOST_TEST(odd.scale_factor() == 0x1p126);
  // A growth factor whose product leaves double's range lands there too.
  mg::amp::GradScaler huge({.growth_factor = 1e300, .growth_interval = 1});
  huge.update();
  BOOST_TEST(huge.scale_factor() == 0x1p126);
  // With a max_scale the clamp makes the growth land on it instead.
  mg::amp::GradScaler capped({.init_scale = 1e30, .growth_interval = 1, .max_scale = 3e30});
  capped.update();
  capped.update();
  BOOST_TEST(capped.scale_factor() == 3e30);
}

BOOST_AUTO_TEST_CASE(backoff_stops_at_the_floor) {
  auto overflow_step = [](mg::amp::GradScaler& s) {
    mg::Tensor p = param_with_grad({0.0, kNaN}, mg::DType::float32);
    s.unscale({p});
    s.update();
  };
  // The default floor: 2^4 backs off 18 times to 2^-14, then stays.
  mg::amp::GradScaler s;
  for (int i = 0; i < 17; ++i) overflow_step(s);
  BOOST_TEST(s.scale_factor() == 0x1p-13);
  for (int i = 0; i < 300; ++i) overflow_step(s);
  BOOST_TEST(s.scale_factor() == 0x1p-14);
  // Without a min_scale: 2^-126, not the 4.9e-324 that a float32
  // reciprocal of inf used to lock in.
  mg::amp::GradScaler unfloored({.min_scale = std::nullopt});
  for (int i = 0; i < 2000; ++i) overflow_step(unfloored);
  BOOST_TEST(unfloored.scale_factor() == 0x1p-126);
  // A backoff factor whose product underflows lands on the floor too.
  mg::amp::GradScaler steep({.backoff_factor = 1e-300, .min_scale = std::nullopt});
  overflow_step(steep);
  BOOST_TEST(steep.scale_factor() == 0x1p-126);
  // A user min_scale that is not a power of two is landed on exactly.
  mg::amp::GradScaler user({.init_scale = 1.0, .min_scale = 0.3});
  overflow_step(user);
  overflow_step(user);
  BOOST_TEST(user.scale_factor() == 0.3);
}

BOOST_AUTO_TEST_CASE(step_calls_the_optimizer_only_without_overflow) {
  mg::amp::GradScaler s;
  CountingOptimizer opt;
  s.step(opt);  // nothing found yet
  BOOST_TEST(opt.steps == 1);
  mg::Tensor p = param_with_grad({1.0}, mg::DType::float32);
  s.unscale({p});
  s.step(opt);
  s.update();
  s.step(opt);
  BOOST_TEST(opt.steps == 3);
}

// Upstream: PyTorch test_cuda.py / test_torch.py test_grad_scaling_state_dict (its values: test_upstream_scaler.cpp).
BOOST_AUTO_TEST_CASE(state_dict_round_trip) {
  // The default scaler's dict has the floor.
  const auto defaults = mg::amp::GradScaler().state_dict();
  BOOST_TEST(defaults.size() == 6u);
  BOOST_TEST(defaults.at("min_scale").item<double>() == 0x1p-14);
  // MegEngine's keys in its order; counts as int64, the rest float64.
  BOOST_TEST(defaults.keys() == std::vector<std::string>({"scale_factor", "growth_factor", "backoff_factor",
                                                          "growth_interval", "_growth_tracker", "min_scale"}),
             boost::test_tools::per_element());
  BOOST_TEST(defaults.at("scale_factor").dtype() == mg::DType::float64);
  BOOST_TEST(defaults.at("growth_interval").dtype() == mg::DType::int64);
  BOOST_TEST(defaults.at("_growth_tracker").dtype() == mg::DType::int64);
  BOOST_TEST(!defaults.contains("max_scale"));

  mg::amp::GradScaler s({.init_scale = 64.0,
                         .growth_factor = 4.0,
                         .backoff_factor = 0.25,
                         .growth_interval = 5,
                         .min_scale = std::nullopt});
  mg::Tensor p = param_with_grad({kInf}, mg::DType::float32);
  s.unscale({p});
  s.update();  // 16
  s.update();
  s.update();  // tracker 2
  const auto state = s.state_dict();
  const std::map<std::string, double> expected{{"scale_factor", 16.0},
                                               {"growth_factor", 4.0},
                                               {"backoff_factor", 0.25},
                                               {"growth_interval", 5.0},
                                               {"_growth_tracker", 2.0}};
  BOOST_TEST(same_state(state, expected));

  mg::amp::GradScaler t({.init_scale = 2.0, .growth_interval = 100, .min_scale = 1.0});
  t.load_state_dict(state);
  BOOST_TEST(same_state(t.state_dict(), state));
  BOOST_TEST(!t.options().min_scale.has_value());  // a dict without min_scale has none
  for (int i = 0; i < 3; ++i) t.update();  // behaves like the original from here
  for (int i = 0; i < 3; ++i) s.update();
  BOOST_TEST(same_state(t.state_dict(), s.state_dict()));
  BOOST_TEST(t.scale_factor() == 64.0);

  mg::amp::GradScaler bounded({.init_scale = 8.0, .min_scale = 0.5, .max_scale = 1024.0});
  const auto bounded_state = bounded.state_dict();
  BOOST_TEST(bounded_state.at("min_scale").item<double>() == 0.5);
  BOOST_TEST(bounded_state.at("max_scale").item<double>() == 1024.0);
  mg::amp::GradScaler u;
  u.load_state_dict(bounded_state);
  BOOST_TEST(same_state(u.state_dict(), bounded_state));
  BOOST_TEST(u.options().max_scale.value() == 1024.0);
}

BOOST_AUTO_TEST_CASE(bad_state_dicts_throw_and_load_nothing) {
  const mg::amp::GradScaler good({.init_scale = 32.0, .growth_interval = 4});
  const auto base = to_map(good.state_dict());
  auto with = [&](const std::string& key, double v) {
    auto d = base;
    d[key] = v;
    return d;
  };
  auto without = [&](const std::string& key) {
    auto d = base;
    d.erase(key);
    return d;
  };
  const std::vector<std::map<std::string, double>> bad = {
      with("scale", 2.0),  // unknown key
      with("growth_tracker", 1.0),
      without("scale_factor"),
      without("growth_factor"),
      without("backoff_factor"),
      without("growth_interval"),
      without("_growth_tracker"),
      with("scale_factor", 0.0),
      with("scale_factor", kNaN),
      with("scale_factor", kInf),
      with("growth_factor", 1.0),
      with("backoff_factor", 1.0),
      with("backoff_factor", 0.0),
      with("growth_interval", 2.5),
      with("growth_interval", -1.0),
      with("growth_interval", kNaN),
      with("_growth_tracker", 4.0),  // must be below growth_interval
      with("_growth_tracker", 1.5),
      with("_growth_tracker", -1.0),
      with("min_scale", 64.0),  // above the scale
      with("max_scale", 16.0),  // below the scale
      with("min_scale", -1.0),
      with("scale_factor", 1.6e39),  // outside [2^-126, 2^126]
      with("scale_factor", 0x1p127),
      with("scale_factor", 4.9e-324),
      with("min_scale", 0x1p-127),
      with("max_scale", 1e300),
      {},
  };
  mg::amp::GradScaler s({.init_scale = 8.0, .growth_interval = 10, .max_scale = 100.0});
  s.update();
  const auto before = s.state_dict();
  for (const auto& d : bad) {
    BOOST_CHECK_THROW(s.load_state_dict(from_map(d)), mg::ValueError);
    BOOST_TEST(same_state(s.state_dict(), before));
  }
  // MegEngine's dicts have no min_scale; the limits apply to them all the same.
  for (double scale : {1e-40, 4.9e-324, 1e39}) {
    auto megengine = without("min_scale");
    megengine["scale_factor"] = scale;
    BOOST_CHECK_THROW(s.load_state_dict(from_map(megengine)), mg::ValueError);
    BOOST_TEST(same_state(s.state_dict(), before));
  }
  auto static_dict = with("growth_interval", 0.0);
  static_dict["_growth_tracker"] = 1.0;  // a static scale counts nothing
  BOOST_CHECK_THROW(s.load_state_dict(from_map(static_dict)), mg::ValueError);
  BOOST_TEST(s.options().max_scale.value() == 100.0);
  // A value of more than one element is refused the same way.
  mg::StateDict wide = s.state_dict();
  wide.insert_or_assign("growth_factor", mg::tensor({2.0, 2.0}, {2}, mg::DType::float64));
  BOOST_CHECK_THROW(s.load_state_dict(wide), mg::ShapeError);
  BOOST_TEST(same_state(s.state_dict(), before));
}

BOOST_AUTO_TEST_CASE(old_all_float64_dicts_load) {
  // The form older mixgrad versions saved: every value a 0-d float64.
  mg::amp::GradScaler s;
  s.load_state_dict(from_map({{"scale_factor", 256.0},
                              {"growth_factor", 2.0},
                              {"backoff_factor", 0.5},
                              {"growth_interval", 10.0},
                              {"_growth_tracker", 3.0},
                              {"min_scale", 1.0}}));
  BOOST_TEST(s.scale_factor() == 256.0);
  BOOST_TEST(s.growth_tracker() == 3);
  BOOST_TEST(s.options().growth_interval == 10);
  BOOST_TEST(s.state_dict().at("growth_interval").dtype() == mg::DType::int64);
}

BOOST_AUTO_TEST_CASE(state_lives_on_the_device_and_copies_are_independent) {
  mg::amp::GradScaler s({.init_scale = 8.0, .growth_interval = 1});
  mg::Tensor p = param_with_grad({16.0}, mg::DType::float32);
  s.unscale({p});
  const mg::amp::GradScaler copy = s;  // owns its own state tensors
  s.update();
  BOOST_TEST(s.scale_factor() == 16.0);
  BOOST_TEST(copy.scale_factor() == 8.0);
  // state_dict() snapshots: later updates do not change a saved dict.
  const mg::StateDict saved = s.state_dict();
  s.update();
  BOOST_TEST(saved.at("scale_factor").item<double>() == 16.0);
  BOOST_TEST(s.scale_factor() == 32.0);
}

BOOST_AUTO_TEST_CASE(throwing_unscale_changes_nothing) {
  mg::amp::GradScaler s(4.0);
  mg::Tensor good = param_with_grad({8.0}, mg::DType::float32);
  // Tensor::set_grad refuses both gradients; planted past it, unscale must refuse them too.
  mg::Tensor ints = mg::zeros({2});
  const mg::Tensor int_grad = mg::tensor(std::vector<int32_t>{1, 2}, {2});
  BOOST_CHECK_THROW(ints.set_grad(int_grad), mg::DTypeError);
  ints.impl()->grad = int_grad;
  mg::Tensor broadcast = mg::zeros({2, 3});
  const mg::Tensor broadcast_grad = mg::F::broadcast_to(mg::tensor({1.f, 2.f, 3.f}, {3}), {2, 3});
  BOOST_CHECK_THROW(broadcast.set_grad(broadcast_grad), mg::ShapeError);
  broadcast.impl()->grad = broadcast_grad;
  const auto before = s.state_dict();
  BOOST_CHECK_THROW(s.unscale({good, ints}), mg::DTypeError);
  BOOST_CHECK_THROW(s.unscale({good, broadcast}), mg::ShapeError);
  BOOST_TEST(good.grad().item<float>() == 8.f);
  BOOST_TEST(same_state(s.state_dict(), before));
  BOOST_TEST(!s.found_non_finite());
  s.unscale({good});  // not marked as unscaled by the failed calls
  BOOST_TEST(good.grad().item<float>() == 2.f);
}

BOOST_AUTO_TEST_SUITE_END()
