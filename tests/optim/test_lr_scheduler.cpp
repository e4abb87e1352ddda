// Learning-rate schedules against PyTorch's closed forms, written out here
// by hand (torch.optim.lr_scheduler: StepLR, CosineAnnealingLR, LinearLR,
// OneCycleLR, SequentialLR), plus checkpoints, bad arguments and the
// scaler-aware step.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "mixgrad/ops/creation.hpp"

namespace mg = mixgrad;
namespace tt = boost::test_tools;
using Vec = std::vector<double>;

namespace {

constexpr double kPi = std::numbers::pi;
constexpr double kInf = std::numeric_limits<double>::infinity();

mg::Tensor param() { return mg::zeros(mg::Shape{2}, mg::DType::float32); }

// The lr the scheduler set at construction, then after each of `n` steps.
Vec sequence(mg::optim::LRScheduler& s, int n) {
  Vec out{s.optimizer().lr()};
  for (int i = 0; i < n; ++i) {
    s.step();
    BOOST_TEST(s.last_lr() == s.optimizer().lr());
    out.push_back(s.optimizer().lr());
  }
  return out;
}

void check_close(const Vec& got, const Vec& want) {
  BOOST_TEST_REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    BOOST_TEST_CONTEXT("step " << i) { BOOST_TEST(got[i] == want[i], tt::tolerance(1e-12)); }
  }
}

// Expects ValueError whose message names `who` and `value`.
template <class F>
void expect_value_error(F&& f, const std::string& who, const std::string& value) {
  try {
    f();
    BOOST_ERROR("no ValueError for " << who << " " << value);
  } catch (const mg::ValueError& e) {
    const std::string msg = e.what();
    BOOST_TEST_CONTEXT(msg) {
      BOOST_TEST(msg.find(who) != std::string::npos);
      BOOST_TEST(msg.find(value) != std::string::npos);
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(lr_scheduler)

BOOST_AUTO_TEST_CASE(step_lr_decays_every_step_size) {
  mg::optim::SGD opt({param()}, {.lr = 1.0});
  mg::optim::StepLR s(opt, 2, 0.1);
  check_close(sequence(s, 4), {1.0, 1.0, 0.1, 0.1, 0.01});
  BOOST_TEST(s.last_epoch() == 4);
  BOOST_TEST(s.base_lr() == 1.0);
}

BOOST_AUTO_TEST_CASE(cosine_endpoints_and_midpoint) {
  mg::optim::SGD opt({param()}, {.lr = 1.0});
  mg::optim::CosineAnnealingLR s(opt, 10, 0.1);
  const Vec got = sequence(s, 12);
  BOOST_TEST(got[0] == 1.0, tt::tolerance(1e-12));
  BOOST_TEST(got[5] == 0.55, tt::tolerance(1e-12));  // halfway between base and eta_min
  BOOST_TEST(got[10] == 0.1, tt::tolerance(1e-12));
  // eta_min + (base - eta_min) (1 + cos(pi t / T)) / 2, and past T_max it
  // rises again as PyTorch's does.
  BOOST_TEST(got[3] == 0.1 + 0.9 * (1 + std::cos(kPi * 3 / 10)) / 2, tt::tolerance(1e-12));
  BOOST_TEST(got[12] == 0.1 + 0.9 * (1 + std::cos(kPi * 12 / 10)) / 2, tt::tolerance(1e-12));
  BOOST_TEST(got[12] > got[10]);
}

BOOST_AUTO_TEST_CASE(linear_warmup_then_constant) {
  mg::optim::SGD opt({param()}, {.lr = 0.8});
  mg::optim::LinearLR s(opt, 0.25, 1.0, 4);
  // 0.8 * (0.25 + 0.75 * min(t, 4) / 4)
  check_close(sequence(s, 6), {0.2, 0.35, 0.5, 0.65, 0.8, 0.8, 0.8});
}

BOOST_AUTO_TEST_CASE(linear_defaults_are_pytorchs) {
  mg::optim::SGD opt({param()}, {.lr = 0.9});
  mg::optim::LinearLR s(opt);  // start 1/3, end 1, 5 iterations
  check_close(sequence(s, 5), {0.3, 0.42, 0.54, 0.66, 0.78, 0.9});
}

BOOST_AUTO_TEST_CASE(one_cycle_cos) {
  mg::optim::SGD opt({param()}, {.lr = 123.0});  // the base lr plays no part
  mg::optim::OneCycleLR s(opt, 1.0, 10);          // pct 0.3, div 25, final div 1e4
  const Vec got = sequence(s, 10);
  const double initial = 1.0 / 25, min_lr = initial / 1e4;
  BOOST_TEST(got[0] == initial, tt::tolerance(1e-12));
  BOOST_TEST(got[1] == (1.0 + initial) / 2, tt::tolerance(1e-12));  // halfway up
  BOOST_TEST(got[2] == 1.0, tt::tolerance(1e-12));                  // peak at 0.3 * 10 - 1
  BOOST_TEST(got[9] == min_lr, tt::tolerance(1e-9));                // end at total_steps - 1
  // Second phase: from step 2 to step 9, cos annealing max -> min.
  const double pct = 3.0 / 7.0;
  BOOST_TEST(got[5] == min_lr + (1.0 - min_lr) / 2 * (std::cos(kPi * pct) + 1), tt::tolerance(1e-12));
  for (int i = 2; i < 9; ++i) BOOST_TEST(got[i + 1] < got[i]);
  // PyTorch allows stepping to total_steps, not past it.
  const double lr = opt.lr();
  expect_value_error([&] { s.step(); }, "OneCycleLR", "11");
  BOOST_TEST(s.last_epoch() == 10);
  BOOST_TEST(opt.lr() == lr);
}

BOOST_AUTO_TEST_CASE(one_cycle_linear_and_three_phase) {
  mg::optim::SGD opt({param()}, {.lr = 0.5});
  mg::optim::OneCycleLR lin(opt, 2.0, 10,
                            {.pct_start = 0.3, .anneal_strategy = mg::optim::AnnealStrategy::linear, .div_factor = 4,
                             .final_div_factor = 100});
  Vec got = sequence(lin, 9);
  // initial 0.5, peak 2 at step 2, min 0.005 at step 9, straight lines.
  check_close(got, {0.5, 1.25, 2.0, 2.0 + (0.005 - 2.0) * 1 / 7, 2.0 + (0.005 - 2.0) * 2 / 7,
                    2.0 + (0.005 - 2.0) * 3 / 7, 2.0 + (0.005 - 2.0) * 4 / 7, 2.0 + (0.005 - 2.0) * 5 / 7,
                    2.0 + (0.005 - 2.0) * 6 / 7, 0.005});

  mg::optim::SGD opt3({param()}, {.lr = 0.5});
  mg::optim::OneCycleLR three(
      opt3, 2.0, 10,
      {.anneal_strategy = mg::optim::AnnealStrategy::linear, .div_factor = 4, .final_div_factor = 100, .three_phase = true});
  got = sequence(three, 9);
  // Phases end at 2 (up to max), 4 (back to initial), 9 (down to min).
  check_close(got, {0.5, 1.25, 2.0, 1.25, 0.5, 0.5 + (0.005 - 0.5) * 1 / 5, 0.5 + (0.005 - 0.5) * 2 / 5,
                    0.5 + (0.005 - 0.5) * 3 / 5, 0.5 + (0.005 - 0.5) * 4 / 5, 0.005});
}

BOOST_AUTO_TEST_CASE(sequential_warmup_then_cosine) {
  mg::optim::SGD opt({param()}, {.lr = 1.0});
  auto warm = std::make_shared<mg::optim::LinearLR>(opt, 0.1, 1.0, 2);
  BOOST_TEST(opt.lr() == 0.1, tt::tolerance(1e-15));
  // Built while the lr is 0.1: SequentialLR gives it the shared base 1.0.
  auto cos = std::make_shared<mg::optim::CosineAnnealingLR>(opt, 4);
  mg::optim::SequentialLR s(opt, {warm, cos}, {2});
  BOOST_TEST(cos->base_lr() == 1.0);
  BOOST_TEST(s.base_lr() == 1.0);
  // warm-up 0.1, 0.55; at the milestone the cosine starts from its step 0.
  check_close(sequence(s, 7), {0.1, 0.55, 1.0, (1 + std::cos(kPi / 4)) / 2, 0.5, (1 + std::cos(3 * kPi / 4)) / 2, 0.0,
                               (1 + std::cos(5 * kPi / 4)) / 2});
  // The child in charge follows: the cosine has taken 5 of its own steps.
  BOOST_TEST(cos->last_epoch() == 5);
  BOOST_TEST(cos->last_lr() == opt.lr());
  BOOST_TEST(warm->last_epoch() == 1);
}

BOOST_AUTO_TEST_CASE(sequential_of_three) {
  mg::optim::SGD opt({param()}, {.lr = 2.0});
  auto a = std::make_shared<mg::optim::LinearLR>(opt, 0.5, 1.0, 2);
  auto b = std::make_shared<mg::optim::StepLR>(opt, 1, 0.5);
  auto c = std::make_shared<mg::optim::LinearLR>(opt, 0.25, 0.25, 1);
  mg::optim::SequentialLR s(opt, {a, b, c}, {2, 4});
  check_close(sequence(s, 5), {1.0, 1.5, 2.0, 1.0, 0.5, 0.5});
}

BOOST_AUTO_TEST_CASE(state_dict_round_trip_resumes_the_sequence) {
  auto run = [](auto make, int before, int after) {
    mg::optim::SGD opt({param()}, {.lr = 1.0});
    auto s = make(opt);
    for (int i = 0; i < before; ++i) s->step();
    // Through the safetensors format, as a checkpoint holds it.
    const mg::StateDict sd = mg::io::load_bytes(mg::io::save_bytes(s->state_dict()));
    const Vec want = sequence(*s, after);

    mg::optim::SGD opt2({param()}, {.lr = 7.0});  // another lr: the dict decides
    auto s2 = make(opt2);
    s2->load_state_dict(sd);
    BOOST_TEST(s2->last_epoch() == before);
    check_close(sequence(*s2, after), want);
  };
  run([](mg::optim::Optimizer& o) { return std::make_unique<mg::optim::StepLR>(o, 3, 0.5); }, 4, 5);
  run([](mg::optim::Optimizer& o) { return std::make_unique<mg::optim::CosineAnnealingLR>(o, 8, 0.01); }, 3, 5);
  run([](mg::optim::Optimizer& o) { return std::make_unique<mg::optim::OneCycleLR>(o, 0.5, 12); }, 5, 7);
  run(
      [](mg::optim::Optimizer& o) {
        auto w = std::make_shared<mg::optim::LinearLR>(o, 0.2, 1.0, 3);
        auto c = std::make_shared<mg::optim::CosineAnnealingLR>(o, 6);
        return std::make_unique<mg::optim::SequentialLR>(o, std::vector<std::shared_ptr<mg::optim::LRScheduler>>{w, c},
                                                         std::vector<int64_t>{3});
      },
      2, 6);
}

BOOST_AUTO_TEST_CASE(state_dict_keys_and_bad_dicts) {
  mg::optim::SGD opt({param()}, {.lr = 1.0});
  mg::optim::StepLR s(opt, 2, 0.5);
  s.step();
  const mg::StateDict sd = s.state_dict();
  BOOST_TEST(sd.keys() == (std::vector<std::string>{"last_epoch", "base_lr", "options.gamma", "options.step_size"}),
             tt::per_element());
  BOOST_TEST(sd.at("last_epoch").dtype() == mg::DType::int64);
  BOOST_TEST(sd.at("last_epoch").item<int64_t>() == 1);

  mg::optim::SGD opt2({param()}, {.lr = 3.0});
  mg::optim::CosineAnnealingLR cos(opt2, 5);
  cos.step();
  const auto check_unchanged = [&] {
    BOOST_TEST(cos.last_epoch() == 1);
    BOOST_TEST(cos.base_lr() == 3.0);
    BOOST_TEST(opt2.lr() == 3.0 * (1 + std::cos(kPi / 5)) / 2, tt::tolerance(1e-15));
  };
  expect_value_error([&] { cos.load_state_dict(sd); }, "CosineAnnealingLR", "options.gamma");  // another kind
  check_unchanged();

  mg::StateDict missing = cos.state_dict();
  missing.erase("base_lr");
  expect_value_error([&] { cos.load_state_dict(missing); }, "CosineAnnealingLR", "base_lr");
  check_unchanged();

  mg::StateDict bad = cos.state_dict();
  bad.insert_or_assign("options.T_max", mg::scalar(0.0, mg::DType::float64));
  expect_value_error([&] { cos.load_state_dict(bad); }, "CosineAnnealingLR", "T_max");
  check_unchanged();

  mg::optim::OneCycleLR one(opt, 1.0, 5);
  mg::StateDict past = one.state_dict();
  past.insert_or_assign("last_epoch", mg::scalar(6.0, mg::DType::int64));
  expect_value_error([&] { one.load_state_dict(past); }, "OneCycleLR", "last_epoch 6");
  BOOST_TEST(one.last_epoch() == 0);

  bad = cos.state_dict();
  bad.insert_or_assign("last_epoch", mg::scalar(-1.0, mg::DType::int64));
  expect_value_error([&] { cos.load_state_dict(bad); }, "CosineAnnealingLR", "-1");
  check_unchanged();
}

BOOST_AUTO_TEST_CASE(bad_arguments_throw_and_change_nothing) {
  mg::optim::SGD opt({param()}, {.lr = 0.5});
  using namespace mg::optim;
  expect_value_error([&] { StepLR(opt, 0); }, "StepLR", "step_size");
  expect_value_error([&] { StepLR(opt, 2, -0.1); }, "StepLR", "-0.1");
  expect_value_error([&] { CosineAnnealingLR(opt, 0); }, "CosineAnnealingLR", "T_max");
  expect_value_error([&] { CosineAnnealingLR(opt, 10, kInf); }, "CosineAnnealingLR", "inf");
  expect_value_error([&] { LinearLR(opt, 0.0); }, "LinearLR", "start_factor");
  expect_value_error([&] { LinearLR(opt, 1.5); }, "LinearLR", "1.5");
  expect_value_error([&] { LinearLR(opt, 0.5, 1.25); }, "LinearLR", "1.25");
  expect_value_error([&] { LinearLR(opt, 0.5, 1.0, 0); }, "LinearLR", "total_iters");
  expect_value_error([&] { OneCycleLR(opt, 0.0, 10); }, "OneCycleLR", "max_lr");
  expect_value_error([&] { OneCycleLR(opt, 1.0, 0); }, "OneCycleLR", "total_steps");
  expect_value_error([&] { OneCycleLR(opt, 1.0, 10, {.pct_start = 1.5}); }, "OneCycleLR", "1.5");
  expect_value_error([&] { OneCycleLR(opt, 1.0, 10, {.div_factor = 0}); }, "OneCycleLR", "div_factor");
  expect_value_error([&] { OneCycleLR(opt, 1.0, 10, {.final_div_factor = -1}); }, "OneCycleLR", "final_div_factor");

  auto a = std::make_shared<StepLR>(opt, 2);
  auto b = std::make_shared<StepLR>(opt, 3);
  const double lr = opt.lr();
  expect_value_error([&] { SequentialLR(opt, {a, b}, {}); }, "SequentialLR", "milestones");
  expect_value_error([&] { SequentialLR(opt, {a, b}, {0}); }, "SequentialLR", "milestones[0] = 0");
  expect_value_error([&] { SequentialLR(opt, {a, b, a}, {3, 3}); }, "SequentialLR", "milestones[1] = 3");
  expect_value_error([&] { SequentialLR(opt, {a, nullptr}, {3}); }, "SequentialLR", "null");
  mg::optim::SGD other({param()}, {.lr = 0.5});
  auto c = std::make_shared<StepLR>(other, 2);
  expect_value_error([&] { SequentialLR(opt, {a, c}, {3}); }, "SequentialLR", "another optimizer");
  BOOST_TEST(opt.lr() == lr);
  BOOST_TEST(opt.lr() == 0.5);
}

// The scaler-aware step: an overflowed step does not advance the schedule,
// a clean one does; plain step() always advances (PyTorch's behaviour).
BOOST_AUTO_TEST_CASE(step_with_scaler_skips_overflowed_steps) {
  mg::Tensor p = param();
  mg::optim::SGD opt({p}, {.lr = 1.0});
  mg::optim::StepLR sched(opt, 1, 0.5);
  mg::amp::GradScaler scaler({.init_scale = 4.0});

  // Overflow: an inf in the gradient. The documented loop order.
  p.set_grad(mg::tensor(Vec{1.0, kInf}, mg::Shape{2}, mg::DType::float32));
  scaler.unscale({p});
  scaler.step(opt);
  sched.step(scaler);
  scaler.update();
  BOOST_TEST(sched.last_epoch() == 0);
  BOOST_TEST(opt.lr() == 1.0);
  BOOST_TEST(p.to_vector<float>() == std::vector<float>({0.f, 0.f}), tt::per_element());  // the step was skipped
  // After update() the flag is still readable: calling it there skips too.
  sched.step(scaler);
  BOOST_TEST(sched.last_epoch() == 0);
  opt.clear_grad();

  // A clean step advances, before or after update().
  p.set_grad(mg::tensor(Vec{4.0, 8.0}, mg::Shape{2}, mg::DType::float32));
  scaler.unscale({p});
  scaler.step(opt);
  sched.step(scaler);
  scaler.update();
  BOOST_TEST(sched.last_epoch() == 1);
  BOOST_TEST(opt.lr() == 0.5);
  // The update used lr 1 (set before this step), on the unscaled grads (scale 2 after the backoff).
  BOOST_TEST(p.to_vector<float>() == std::vector<float>({-2.f, -4.f}), tt::per_element());
  opt.clear_grad();

  p.set_grad(mg::tensor(Vec{0.0, 0.0}, mg::Shape{2}, mg::DType::float32));
  scaler.unscale({p});
  scaler.step(opt);
  scaler.update();
  sched.step(scaler);  // after update()
  BOOST_TEST(sched.last_epoch() == 2);
  BOOST_TEST(opt.lr() == 0.25);

  // Plain step() advances whatever the scaler saw.
  opt.clear_grad();
  p.set_grad(mg::tensor(Vec{kInf, 0.0}, mg::Shape{2}, mg::DType::float32));
  scaler.unscale({p});
  BOOST_TEST(scaler.found_non_finite());
  sched.step();
  BOOST_TEST(sched.last_epoch() == 3);
}

BOOST_AUTO_TEST_CASE(step_with_scaler_in_a_training_loop) {
  // A tiny model trained with the PyTorch-style loop; the second batch's loss
  // is inf, so its gradient overflows: the warm-up must not count that step.
  mg::Tensor w = mg::tensor(Vec{0.5, -0.5}, mg::Shape{2}, mg::DType::float32);
  mg::autodiff::GradManager gm;
  gm.attach({w});
  mg::optim::SGD opt({w}, {.lr = 1.0});
  mg::optim::LinearLR warm(opt, 0.25, 1.0, 3);
  mg::amp::GradScaler scaler({.init_scale = 8.0});
  const Vec batch_scale{1.0, kInf, 1.0};
  Vec lrs{opt.lr()};
  for (double k : batch_scale) {
    {
      auto rec = gm.record();
      mg::Tensor x = mg::tensor(Vec{k, 1.0}, mg::Shape{2}, mg::DType::float32);
      mg::Tensor loss = mg::F::sum(mg::F::mul(w, x));
      scaler.backward(gm, loss, {}, {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
    }
    scaler.step(opt);
    warm.step(scaler);
    scaler.update();
    opt.clear_grad();
    lrs.push_back(opt.lr());
  }
  // Two clean steps advanced the warm-up, the overflowed one did not.
  BOOST_TEST(warm.last_epoch() == 2);
  check_close(lrs, {0.25, 0.5, 0.5, 0.75});

  // A disabled scaler never reports an overflow: every step advances.
  mg::amp::GradScaler off({.enabled = false});
  warm.step(off);
  BOOST_TEST(warm.last_epoch() == 3);
}

BOOST_AUTO_TEST_SUITE_END()
