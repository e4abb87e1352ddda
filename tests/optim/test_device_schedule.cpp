// The schedules' step(scaler) on the device: the count and the lrs live in
// tensors, the scaler's flag gates the advance there, and the optimizer's
// update reads the lr from there. Checked against the host closed forms
// (lr_at) and against the parameters a host-driven loop computes.
#include <boost/test/unit_test.hpp>

#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "mixgrad/ops/creation.hpp"

namespace mg = mixgrad;
using Vec = std::vector<double>;
using mg::optim::LRScheduler;

namespace {

constexpr float kInfF = std::numeric_limits<float>::infinity();

// One optimizer step of the documented loop whose gradient is 1 per element
// after the unscale, or holds an inf (`overflow`): unscale, scaler.step,
// sched.step(scaler), update, clear_grad.
void amp_step(mg::Tensor& p, mg::optim::Optimizer& opt, LRScheduler& sched, mg::amp::GradScaler& scaler,
              bool overflow) {
  const auto s = static_cast<float>(scaler.scale_factor());
  p.set_grad(mg::tensor(std::vector<float>{s, overflow ? kInfF : s}, mg::Shape{2}));
  scaler.unscale({p});
  scaler.step(opt);
  sched.step(scaler);
  scaler.update();
  opt.clear_grad();
}

using Make = std::function<std::shared_ptr<LRScheduler>(mg::optim::Optimizer&)>;

std::vector<std::pair<std::string, Make>> schedules() {
  using namespace mg::optim;
  return {
      {"StepLR", [](Optimizer& o) { return std::make_shared<StepLR>(o, 3, 0.5); }},
      {"CosineAnnealingLR", [](Optimizer& o) { return std::make_shared<CosineAnnealingLR>(o, 10, 0.01); }},
      {"LinearLR", [](Optimizer& o) { return std::make_shared<LinearLR>(o, 0.1, 1.0, 4); }},
      {"OneCycleLR", [](Optimizer& o) { return std::make_shared<OneCycleLR>(o, 1.0, 30); }},
      {"OneCycleLR three-phase linear",
       [](Optimizer& o) {
         return std::make_shared<OneCycleLR>(
             o, 0.5, 30, OneCycleOptions{.anneal_strategy = AnnealStrategy::linear, .three_phase = true});
       }},
      {"SequentialLR",
       [](Optimizer& o) {
         auto warm = std::make_shared<LinearLR>(o, 0.25, 1.0, 4);
         auto cos = std::make_shared<CosineAnnealingLR>(o, 12);
         return std::make_shared<SequentialLR>(o, std::vector<std::shared_ptr<LRScheduler>>{warm, cos},
                                               std::vector<int64_t>{5});
       }},
  };
}

}  // namespace

BOOST_AUTO_TEST_SUITE(device_schedule)

// Every third step overflows. The count advances on the clean steps only, the
// lr is lr_at(count) bit for bit, and the update used the lr of the step
// before: the parameter is 0 - sum of those lrs, in float32 as the kernel
// rounds them.
BOOST_AUTO_TEST_CASE(skipped_steps_do_not_advance_and_the_update_reads_the_device_lr) {
  for (const auto& [name, make] : schedules()) {
    BOOST_TEST_CONTEXT(name) {
      mg::Tensor p = mg::zeros(mg::Shape{2});
      mg::optim::SGD opt({p}, {.lr = 1.0});
      auto sched = make(opt);
      mg::amp::GradScaler scaler({.init_scale = 4.0, .growth_interval = 2});
      int64_t clean = 0;
      float expected = 0.0f;
      for (int i = 0; i < 20; ++i) {
        const bool overflow = i % 3 == 1;
        const double lr_used = sched->lr_at(clean);
        amp_step(p, opt, *sched, scaler, overflow);
        if (!overflow) {
          ++clean;
          expected -= static_cast<float>(lr_used);
        }
        BOOST_TEST_CONTEXT("step " << i) {
          BOOST_TEST(sched->on_device());
          BOOST_TEST(opt.lr_tensor(0).defined());
          BOOST_TEST(sched->last_epoch() == clean);
          BOOST_TEST(opt.lr() == sched->lr_at(clean));  // exact: the same closed form on the device
          BOOST_TEST(sched->last_lr() == opt.lr());
          BOOST_TEST(p.to_vector<float>()[0] == expected);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(every_group_follows_its_own_base) {
  mg::Tensor a = mg::zeros(mg::Shape{2}), b = mg::zeros(mg::Shape{2});
  mg::optim::SGD opt({{{a}, {}}, {{b}, {{"lr", 0.2}}}}, {.lr = 1.0});
  mg::optim::CosineAnnealingLR sched(opt, 8);
  mg::amp::GradScaler scaler;
  for (int i = 0; i < 5; ++i) {
    for (mg::Tensor* t : {&a, &b}) t->set_grad(mg::tensor(std::vector<float>{1.0f, i == 2 ? kInfF : 1.0f}, mg::Shape{2}));
    scaler.unscale({a, b});
    scaler.step(opt);
    sched.step(scaler);
    scaler.update();
    opt.clear_grad();
  }
  BOOST_TEST(sched.last_epoch() == 4);
  BOOST_TEST(opt.lr(0) == sched.lr_for(4, 1.0));
  BOOST_TEST(opt.lr(1) == sched.lr_for(4, 0.2));
}

// OneCycleLR refuses to pass total_steps. On the device the host only knows
// a bound on the count (skipped steps make it overstate), so near the end it
// reads the count, and throws only when the real count is at the end.
BOOST_AUTO_TEST_CASE(one_cycle_end_is_checked_against_the_real_count) {
  mg::Tensor p = mg::zeros(mg::Shape{2});
  mg::optim::SGD opt({p}, {.lr = 1.0});
  mg::optim::OneCycleLR sched(opt, 1.0, 6);
  mg::amp::GradScaler scaler;
  for (int i = 0; i < 9; ++i) amp_step(p, opt, sched, scaler, i < 3);  // 3 skipped, 6 taken: 9 calls
  BOOST_TEST(sched.last_epoch() == 6);
  const double lr = opt.lr();
  const std::vector<float> before = p.to_vector<float>();
  p.set_grad(mg::ones(mg::Shape{2}));
  scaler.unscale({p});
  BOOST_CHECK_THROW(sched.step(scaler), mg::ValueError);
  BOOST_TEST(sched.last_epoch() == 6);
  BOOST_TEST(opt.lr() == lr);
  BOOST_TEST(p.to_vector<float>() == before);
}

// A StepLR whose lr grows can overflow; it stays on the host, where each
// value is checked, and still skips the overflowed steps.
BOOST_AUTO_TEST_CASE(a_growing_step_lr_stays_on_the_host) {
  mg::Tensor p = mg::zeros(mg::Shape{2});
  mg::optim::SGD opt({p}, {.lr = 1.0});
  mg::optim::StepLR sched(opt, 1, 2.0);
  mg::amp::GradScaler scaler;
  amp_step(p, opt, sched, scaler, true);
  amp_step(p, opt, sched, scaler, false);
  BOOST_TEST(!sched.on_device());
  BOOST_TEST(!opt.lr_tensor(0).defined());
  BOOST_TEST(sched.last_epoch() == 1);
  BOOST_TEST(opt.lr() == 2.0);
}

// A checkpoint taken on the device holds the real count; loading it puts the
// schedule back on the host, and both continue with the same lrs.
BOOST_AUTO_TEST_CASE(state_dict_round_trip_from_the_device) {
  mg::Tensor p = mg::zeros(mg::Shape{2}), q = mg::zeros(mg::Shape{2});
  mg::optim::SGD opt_a({p}, {.lr = 1.0}), opt_b({q}, {.lr = 1.0});
  mg::optim::CosineAnnealingLR a(opt_a, 10), b(opt_b, 10);
  mg::amp::GradScaler sa, sb;
  for (int i = 0; i < 5; ++i) amp_step(p, opt_a, a, sa, i % 2 == 0);
  const mg::StateDict sd = a.state_dict();
  BOOST_TEST(sd.at("last_epoch").item<double>() == 2.0);
  b.load_state_dict(sd);
  BOOST_TEST(!b.on_device());
  BOOST_TEST(b.last_epoch() == 2);
  BOOST_TEST(opt_b.lr() == opt_a.lr());
  for (int i = 0; i < 4; ++i) {
    amp_step(p, opt_a, a, sa, i == 1);
    amp_step(q, opt_b, b, sb, i == 1);
    BOOST_TEST(opt_b.lr() == opt_a.lr());
  }
  BOOST_TEST(b.on_device());
  BOOST_TEST(b.last_epoch() == a.last_epoch());
}

// A set_lr by hand goes back to the host value until the next advance
// overwrites it, as on the host path.
BOOST_AUTO_TEST_CASE(set_lr_by_hand_until_the_next_advance) {
  mg::Tensor p = mg::zeros(mg::Shape{2});
  mg::optim::SGD opt({p}, {.lr = 1.0});
  mg::optim::LinearLR sched(opt, 0.5, 1.0, 4);
  mg::amp::GradScaler scaler;
  amp_step(p, opt, sched, scaler, false);
  opt.set_lr(0.125);
  BOOST_TEST(!opt.lr_tensor(0).defined());
  BOOST_TEST(opt.lr() == 0.125);
  BOOST_TEST(opt.state_dict().at("options.lr").item<double>() == 0.125);
  amp_step(p, opt, sched, scaler, false);
  BOOST_TEST(opt.lr() == sched.lr_at(2));
  BOOST_TEST(opt.state_dict().at("options.lr").item<double>() == sched.lr_at(2));
}

// A SequentialLR's children report their own count on the device as on the host.
BOOST_AUTO_TEST_CASE(sequential_children_report_their_local_count) {
  mg::Tensor p = mg::zeros(mg::Shape{2});
  mg::optim::SGD opt({p}, {.lr = 1.0});
  auto warm = std::make_shared<mg::optim::LinearLR>(opt, 0.25, 1.0, 3);
  auto cos = std::make_shared<mg::optim::CosineAnnealingLR>(opt, 10);
  mg::optim::SequentialLR sched(opt, {warm, cos}, {3});
  mg::amp::GradScaler scaler;
  for (int i = 0; i < 7; ++i) amp_step(p, opt, sched, scaler, i == 0);
  BOOST_TEST(sched.on_device());
  BOOST_TEST(sched.last_epoch() == 6);
  BOOST_TEST(cos->last_epoch() == 3);
  BOOST_TEST(cos->last_lr() == opt.lr());
}

BOOST_AUTO_TEST_CASE(set_lr_tensor_checks_its_tensor) {
  mg::Tensor p = mg::zeros(mg::Shape{2});
  mg::optim::Adam opt({p}, {.lr = 0.5});
  BOOST_CHECK_THROW(opt.set_lr_tensor(0, mg::scalar(0.1, mg::DType::float32)), mg::DTypeError);
  BOOST_CHECK_THROW(opt.set_lr_tensor(0, mg::zeros(mg::Shape{2}, mg::DType::float64)), mg::DTypeError);
  BOOST_CHECK_THROW(opt.set_lr_tensor(1, mg::scalar(0.1, mg::DType::float64)), mg::ValueError);
  BOOST_TEST(!opt.lr_tensor(0).defined());
  BOOST_TEST(opt.lr() == 0.5);
  // Adam with the lr from a tensor: the same step as with the host value.
  mg::Tensor q = mg::zeros(mg::Shape{2});
  mg::optim::Adam host({q}, {.lr = 0.25});
  opt.set_lr_tensor(0, mg::scalar(0.25, mg::DType::float64));
  for (mg::Tensor* t : {&p, &q}) t->set_grad(mg::tensor(std::vector<float>{0.5f, -2.0f}, mg::Shape{2}));
  opt.step();
  host.step();
  BOOST_TEST(p.to_vector<float>() == q.to_vector<float>());
  BOOST_TEST(opt.lr() == 0.25);
}

BOOST_AUTO_TEST_SUITE_END()
