// The scaler-optimizer protocol of mixgrad/amp_step.hpp, each side alone:
// an optimizer driven by hand-made AmpSteps and gradient marks (no
// GradScaler), and a GradScaler driving an optimizer of the user's own
// (no optim::Optimizer).
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "mixgrad/amp/grad_scaler.hpp"
#include "mixgrad/amp_step.hpp"
#include "mixgrad/autodiff/grad_manager.hpp"
#include "mixgrad/functional.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/optim/sgd.hpp"

namespace mg = mixgrad;
using Vec = std::vector<double>;

namespace {

Vec values(const mg::Tensor& t) { return t.to_vector<double>(); }

mg::Tensor flag(double v) { return mg::scalar(v, mg::DType::float32); }

struct Setup {
  mg::Tensor p = mg::tensor(Vec{1.0, -2.0, 0.5}, {3});
  mg::optim::SGD opt{{p}, {.lr = 0.5}};
};

const int kScaler = 0;  // stands for a scaler: only its address matters

}  // namespace

BOOST_AUTO_TEST_SUITE(amp_step)

BOOST_AUTO_TEST_CASE(a_gradient_mark_belongs_to_the_gradient_tensor) {
  mg::Tensor g = mg::tensor(Vec{1.0, 2.0, 3.0}, {3});
  BOOST_TEST(mg::grad_scaling(g).scaled_by == nullptr);
  BOOST_TEST(!mg::grad_scaling(g).found_inf.defined());
  mg::set_grad_scaling(g, {.scaled_by = &kScaler, .found_inf = mg::Tensor()});
  BOOST_TEST(mg::grad_scaling(g).scaled_by == &kScaler);
  mg::Tensor same = g;  // another handle to the same tensor sees the mark
  BOOST_TEST(mg::grad_scaling(same).scaled_by == &kScaler);
  BOOST_TEST(mg::grad_scaling(g.clone()).scaled_by == nullptr);  // a new tensor carries none
  mg::set_grad_scaling(mg::Tensor(), {.scaled_by = &kScaler, .found_inf = mg::Tensor()});  // a no-op
  BOOST_TEST(mg::grad_scaling(mg::Tensor()).scaled_by == nullptr);
}

// The mark is a side structure: a tensor no scaler touched carries none, a
// marked one carries it, and a mark set back to "not scaled" frees it.
BOOST_AUTO_TEST_CASE(only_marked_tensors_carry_amp_state) {
  mg::Tensor w = mg::tensor(Vec{1.0, 2.0}, {2});
  mg::autodiff::GradManager gm;
  gm.attach({w});
  {
    auto rec = gm.record();
    gm.backward(mg::F::sum(mg::F::mul(w, w)));
  }
  BOOST_TEST(!w.impl()->scaling);        // a plain parameter
  BOOST_TEST(!w.grad().impl()->scaling);  // a plain backward's gradient
  w.set_grad(mg::Tensor());
  mg::amp::GradScaler scaler;
  {
    auto rec = gm.record();
    scaler.backward(gm, mg::F::sum(mg::F::mul(w, w)), {}, {.unscale_grad = false});
  }
  BOOST_REQUIRE(w.grad().impl()->scaling);  // still multiplied by the scale
  BOOST_TEST(std::string(mg::to_string(mg::grad_scaling(w.grad()).state)) == "scaled");
  BOOST_TEST(mg::grad_scaling(w.grad()).scaled_by == &scaler);
  mg::set_grad_scaling(w.grad(), {});
  BOOST_TEST(!w.grad().impl()->scaling);
  BOOST_TEST(!w.impl()->scaling);
}

BOOST_AUTO_TEST_CASE(a_flagged_gradient_skips_the_plain_step) {
  Setup s;
  const mg::Tensor g = mg::tensor(Vec{1.0, 1.0, 1.0}, {3});
  mg::set_grad_scaling(g, {.scaled_by = nullptr, .found_inf = flag(1.0)});
  s.p.set_grad(g);
  s.opt.step();
  BOOST_TEST(values(s.p) == Vec({1.0, -2.0, 0.5}), boost::test_tools::per_element());
  BOOST_TEST(s.opt.step_count(0) == 0);
  mg::set_grad_scaling(g, {.scaled_by = nullptr, .found_inf = flag(0.0)});  // a clean step
  s.opt.step();
  BOOST_TEST(values(s.p) == Vec({0.5, -2.5, 0.0}), boost::test_tools::per_element());
  BOOST_TEST(s.opt.step_count(0) == 1);
}

BOOST_AUTO_TEST_CASE(a_still_scaled_gradient_needs_its_scalers_amp_step) {
  Setup s;
  const mg::Tensor g = mg::tensor(Vec{8.0, 8.0, -8.0}, {3});  // scaled by 8
  mg::set_grad_scaling(g, {.scaled_by = &kScaler, .found_inf = mg::Tensor()});
  s.p.set_grad(g);
  BOOST_CHECK_THROW(s.opt.step(), mg::StateError);
  const int other = 0;
  BOOST_CHECK_THROW(s.opt.step({.scaler = &other, .inv_scale = mg::Tensor(), .found_inf = mg::Tensor()}),
                    mg::StateError);
  BOOST_CHECK_THROW(s.opt.check_step({.scaler = nullptr, .inv_scale = mg::Tensor(), .found_inf = mg::Tensor()}),
                    mg::StateError);
  // Its scaler's step, but nothing to unscale with: refused, not applied scaled.
  BOOST_CHECK_THROW(s.opt.step({.scaler = &kScaler, .inv_scale = mg::Tensor(), .found_inf = flag(0.0)}),
                    mg::StateError);
  BOOST_TEST(values(s.p) == Vec({1.0, -2.0, 0.5}), boost::test_tools::per_element());

  // The scaler's step with an overflow: nothing changes.
  const mg::Tensor inv = mg::scalar(0.125, mg::DType::float64);
  s.opt.step({.scaler = &kScaler, .inv_scale = inv, .found_inf = flag(1.0)});
  BOOST_TEST(values(s.p) == Vec({1.0, -2.0, 0.5}), boost::test_tools::per_element());
  BOOST_TEST(s.opt.step_count(0) == 0);
  // A clean one: the update reads g * 1/8 = (1, 1, -1); g stays scaled in memory.
  s.opt.step({.scaler = &kScaler, .inv_scale = inv, .found_inf = flag(0.0)});
  BOOST_TEST(values(s.p) == Vec({0.5, -2.5, 1.0}), boost::test_tools::per_element());
  BOOST_TEST(values(g) == Vec({8.0, 8.0, -8.0}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(an_amp_step_leaves_other_gradients_to_their_own_marks) {
  mg::Tensor a = mg::tensor(Vec{1.0}, {1}), b = mg::tensor(Vec{1.0}, {1});
  mg::optim::SGD opt({a, b}, {.lr = 1.0});
  const mg::Tensor ga = mg::tensor(Vec{4.0}, {1}), gb = mg::tensor(Vec{1.0}, {1});
  mg::set_grad_scaling(ga, {.scaled_by = &kScaler, .found_inf = mg::Tensor()});
  mg::set_grad_scaling(gb, {.scaled_by = nullptr, .found_inf = flag(1.0)});  // unscaled in an overflowed step
  a.set_grad(ga);
  b.set_grad(gb);
  opt.step({.scaler = &kScaler, .inv_scale = mg::scalar(0.25, mg::DType::float64), .found_inf = flag(0.0)});
  BOOST_TEST(values(a) == Vec({0.0}), boost::test_tools::per_element());  // 1 - 4 * 0.25
  BOOST_TEST(values(b) == Vec({1.0}), boost::test_tools::per_element());  // its own flag: skipped
}

namespace {

// An optimizer of the user's own, speaking only the protocol: plain SGD on
// float32 tensors through F:: ops, recording the AmpSteps it got.
class MyOptimizer : public mg::AmpStepTarget {
 public:
  MyOptimizer(std::vector<mg::Tensor> params, bool fused) : params_(std::move(params)), fused_(fused) {}
  const std::vector<mg::Tensor>& parameters() const override { return params_; }
  bool step_supports_amp_scaling() const override { return fused_; }
  void check_step(const mg::AmpStep& amp) const override { checks.push_back(amp); }
  MyOptimizer& step(const mg::AmpStep& amp) override {
    steps.push_back(amp);
    for (mg::Tensor p : params_) {
      mg::Tensor g = p.grad();
      const mg::GradScaling mark = mg::grad_scaling(g);
      const mg::Tensor& found_inf = mark.scaled_by != nullptr ? amp.found_inf : mark.found_inf;
      if (found_inf.defined() && found_inf.item<double>() != 0.0) continue;  // a host read: fine here
      if (mark.scaled_by != nullptr) g = mg::F::mul(g, amp.inv_scale.to(mg::DType::float32));
      const mg::Tensor next = mg::F::sub(p, mg::F::mul(g, 0.5)).contiguous();
      std::copy_n(next.data<float>(), p.numel(), p.data<float>());  // p is a contiguous float32 CPU tensor
      p.bump_version();
    }
    return *this;
  }
  mutable std::vector<mg::AmpStep> checks;
  std::vector<mg::AmpStep> steps;

 private:
  std::vector<mg::Tensor> params_;
  bool fused_;
};

// loss = sum(p * x): the gradient of p is x.
void scaled_backward(mg::amp::GradScaler& scaler, mg::autodiff::GradManager& gm, const mg::Tensor& p, const Vec& x) {
  auto rec = gm.record();
  const mg::Tensor loss = mg::F::sum(mg::F::mul(p, mg::tensor(x, {static_cast<int64_t>(x.size())}, p.dtype())));
  scaler.backward(gm, loss, {}, {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_grad_scaler_steps_a_users_optimizer_through_the_protocol) {
  for (bool fused : {false, true}) {
    BOOST_TEST_CONTEXT("fused " << fused) {
      mg::Tensor p = mg::tensor(Vec{1.0, 2.0}, {2}, mg::DType::float32);
      mg::autodiff::GradManager gm;
      gm.attach({p});
      mg::amp::GradScaler scaler({.init_scale = 4.0});
      MyOptimizer opt({p}, fused);
      scaled_backward(scaler, gm, p, {2.0, -2.0});
      scaler.step(opt);
      scaler.update();
      BOOST_REQUIRE_EQUAL(opt.steps.size(), 1u);
      // Fused: the scaler checked first, then handed over its scale; else it
      // unscaled in place and stepped plainly.
      BOOST_TEST(opt.checks.size() == (fused ? 1u : 0u));
      BOOST_TEST((opt.steps[0].scaler == &scaler) == fused);
      BOOST_TEST(opt.steps[0].inv_scale.defined() == fused);
      if (fused) BOOST_TEST(opt.steps[0].inv_scale.item<double>() == 0.25);
      BOOST_TEST(values(p) == Vec({0.0, 3.0}), boost::test_tools::per_element());
      BOOST_TEST(values(p.grad()) == (fused ? Vec({8.0, -8.0}) : Vec({2.0, -2.0})), boost::test_tools::per_element());

      // An overflow: the user's optimizer sees the flag and skips.
      p.set_grad(mg::Tensor());
      scaled_backward(scaler, gm, p, {std::numeric_limits<double>::infinity(), 1.0});
      scaler.step(opt);
      BOOST_TEST(scaler.found_non_finite());
      BOOST_TEST(values(p) == Vec({0.0, 3.0}), boost::test_tools::per_element());
      scaler.update();
      BOOST_TEST(scaler.scale_factor() == 2.0);
    }
  }
}

BOOST_AUTO_TEST_CASE(opt_step_scaler_fuses_the_unscale_for_any_optimizer) {
  mg::Tensor p = mg::tensor(Vec{1.0, 2.0}, {2});
  mg::autodiff::GradManager gm;
  gm.attach({p});
  mg::amp::GradScaler scaler({.init_scale = 4.0});
  mg::optim::SGD opt({p}, {.lr = 0.5});  // not built with step_supports_amp_scaling
  scaled_backward(scaler, gm, p, {2.0, -2.0});
  opt.step(scaler);
  BOOST_TEST(values(p) == Vec({0.0, 3.0}), boost::test_tools::per_element());
  BOOST_TEST(values(p.grad()) == Vec({8.0, -8.0}), boost::test_tools::per_element());  // left scaled: fused
}

BOOST_AUTO_TEST_SUITE_END()
