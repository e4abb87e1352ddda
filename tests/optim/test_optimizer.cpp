// What every optimizer shares: state dicts for checkpoints, clear_grad, and
// the found-inf flag a GradScaler leaves on the gradients it unscaled.
#include <boost/test/unit_test.hpp>

#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "mixgrad/ops/creation.hpp"

namespace mg = mixgrad;
using Vec = std::vector<double>;

namespace {

mg::Tensor make(const Vec& v, mg::DType dt = mg::DType::float32) {
  return mg::tensor(v, {static_cast<int64_t>(v.size())}, dt);
}

std::vector<mg::Tensor> fresh_params() { return {make({1.0, 2.0, 3.0}), mg::full({2, 2}, 0.5)}; }

void set_grads(const std::vector<mg::Tensor>& ps, double k) {
  ps[0].set_grad(make({k, -k, 2 * k}));
  ps[1].set_grad(mg::full({2, 2}, 0.3 * k));
}

std::vector<mg::Tensor> clones(const std::vector<mg::Tensor>& ps) {
  std::vector<mg::Tensor> out;
  for (const auto& p : ps) out.push_back(p.clone());
  return out;
}

// Runs `a` for two steps, copies parameters and state into a fresh `b`,
// then checks that one more identical step gives identical parameters.
template <class Opt, class Options>
void check_round_trip(const Options& o) {
  auto pa = fresh_params();
  Opt a(pa, o);
  for (int s = 1; s <= 2; ++s) {
    set_grads(pa, s);
    a.step().clear_grad();
  }
  auto pb = clones(pa);
  Opt b(pb, Options{});  // default options: the dict brings the real ones
  b.load_state_dict(a.state_dict());
  BOOST_TEST(b.lr() == a.lr());
  BOOST_TEST(b.step_count(0) == 2);
  set_grads(pa, 3);
  set_grads(pb, 3);
  a.step();
  b.step();
  for (size_t i = 0; i < pa.size(); ++i)
    BOOST_TEST(pa[i].to_vector<double>() == pb[i].to_vector<double>(), boost::test_tools::per_element());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(optimizer)

BOOST_AUTO_TEST_CASE(state_dict_round_trip) {
  check_round_trip<mg::optim::SGD>(mg::optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true});
  check_round_trip<mg::optim::Adam>(mg::optim::AdamOptions{.lr = 0.01, .betas = {0.8, 0.95}, .amsgrad = true});
  check_round_trip<mg::optim::AdamW>(mg::optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.1});
}

BOOST_AUTO_TEST_CASE(state_dict_keys) {
  auto ps = fresh_params();
  mg::optim::Adam opt(ps, {.lr = 0.01});
  ps[1].set_grad(mg::full({2, 2}, 1.0));
  opt.step();
  const auto sd = opt.state_dict();
  BOOST_TEST(sd.at("options.lr").item<double>() == 0.01);
  BOOST_TEST(sd.at("options.beta2").item<double>() == 0.999);
  BOOST_TEST(!sd.contains("state.0.step"));  // never updated
  BOOST_TEST(sd.at("state.1.step").dtype() == mg::DType::int64);
  BOOST_TEST(sd.at("state.1.step").item<int64_t>() == 1);
  BOOST_TEST(sd.at("state.1.exp_avg").shape() == mg::Shape({2, 2}));
  BOOST_TEST(!sd.contains("state.1.max_exp_avg_sq"));
  // A snapshot: later steps do not change it.
  const double before = sd.at("state.1.exp_avg").at<double>({0, 0});
  opt.step();
  BOOST_TEST(sd.at("state.1.exp_avg").at<double>({0, 0}) == before);
}

BOOST_AUTO_TEST_CASE(bad_state_dicts_change_nothing) {
  auto ps = fresh_params();
  mg::optim::SGD src(ps, {.lr = 0.1, .momentum = 0.9});
  set_grads(ps, 1);
  src.step();
  const mg::StateDict good = src.state_dict();

  auto qs = fresh_params();
  mg::optim::SGD opt(qs, {.lr = 0.5});
  auto expect_unchanged = [&] {
    BOOST_TEST(opt.lr() == 0.5);
    BOOST_TEST(opt.options().momentum == 0.0);
    BOOST_TEST(opt.step_count(0) == 0);
  };

  auto with = [&](auto edit) {
    mg::StateDict d = good;
    edit(d);
    return d;
  };
  BOOST_CHECK_THROW(opt.load_state_dict(with([](mg::StateDict& d) { d.insert("bogus", mg::scalar(1)); })),
                    mg::ValueError);
  expect_unchanged();
  BOOST_CHECK_THROW(opt.load_state_dict(with([](mg::StateDict& d) { d.erase("options.momentum"); })), mg::ValueError);
  expect_unchanged();
  BOOST_CHECK_THROW(opt.load_state_dict(with([](mg::StateDict& d) { d.erase("state.1.momentum_buffer"); })),
                    mg::ValueError);
  expect_unchanged();
  BOOST_CHECK_THROW(opt.load_state_dict(with([](mg::StateDict& d) {
                      d.insert_or_assign("state.1.momentum_buffer", mg::zeros({4}));
                    })),
                    mg::ShapeError);
  expect_unchanged();
  BOOST_CHECK_THROW(opt.load_state_dict(with([](mg::StateDict& d) {
                      d.insert_or_assign("state.0.momentum_buffer", mg::zeros({3}, mg::DType::float64));
                    })),
                    mg::DTypeError);
  expect_unchanged();
  BOOST_CHECK_THROW(opt.load_state_dict(with([](mg::StateDict& d) {
                      d.insert_or_assign("options.lr", mg::scalar(-1.0, mg::DType::float64));
                    })),
                    mg::ValueError);
  expect_unchanged();
  BOOST_CHECK_THROW(opt.load_state_dict(with([](mg::StateDict& d) { d.insert("state.7.step", mg::scalar(1, mg::DType::int64)); })),
                    mg::ValueError);
  expect_unchanged();
  BOOST_CHECK_NO_THROW(opt.load_state_dict(good));
  BOOST_TEST(opt.options().momentum == 0.9);
  BOOST_TEST(opt.step_count(1) == 1);
}

BOOST_AUTO_TEST_CASE(clear_grad_undefines_every_gradient) {
  auto ps = fresh_params();
  mg::optim::SGD opt(ps, {.lr = 0.1});
  set_grads(ps, 1);
  opt.zero_grad();
  for (const auto& p : ps) BOOST_TEST(!p.grad().defined());
  // Stepping with no gradient at all is a no-op.
  opt.step();
  BOOST_TEST(ps[0].to_vector<double>() == Vec({1.0, 2.0, 3.0}), boost::test_tools::per_element());
  BOOST_TEST(opt.name() == "SGD");
}

// Every update rule skips a step whose flag is set: parameters, buffers and
// step counts stay as they were, so the clean step after it is the same as
// an optimizer's first step on those gradients (bias corrections included).
BOOST_AUTO_TEST_CASE(a_set_found_inf_flag_skips_every_update_rule) {
  using Make = std::function<std::unique_ptr<mg::optim::Optimizer>(std::vector<mg::Tensor>)>;
  const std::vector<std::pair<std::string, Make>> kinds = {
      {"SGD", [](auto ps) { return std::make_unique<mg::optim::SGD>(ps, mg::optim::SGDOptions{.lr = 0.1}); }},
      {"SGD momentum",
       [](auto ps) {
         return std::make_unique<mg::optim::SGD>(ps, mg::optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
       }},
      {"Adam", [](auto ps) { return std::make_unique<mg::optim::Adam>(ps, mg::optim::AdamOptions{.lr = 0.1}); }},
      {"AMSGrad",
       [](auto ps) {
         return std::make_unique<mg::optim::Adam>(ps, mg::optim::AdamOptions{.lr = 0.1, .amsgrad = true});
       }},
      {"AdamW",
       [](auto ps) {
         return std::make_unique<mg::optim::AdamW>(ps, mg::optim::AdamWOptions{.lr = 0.1, .weight_decay = 0.1});
       }},
  };
  for (const auto& [name, make_opt] : kinds) {
    BOOST_TEST_CONTEXT(name) {
      auto ps = fresh_params();
      auto ref = clones(ps);
      auto opt = make_opt(ps);
      auto ref_opt = make_opt(ref);
      mg::amp::GradScaler scaler({.init_scale = 1.0, .growth_interval = 0});  // unscaling leaves grads as they are
      set_grads(ps, 1);
      ps[1].set_grad(mg::full({2, 2}, std::numeric_limits<double>::infinity()));
      scaler.unscale(ps);
      scaler.update();
      opt->step();
      opt->step();  // the gradients keep their step's flag
      BOOST_TEST(ps[0].to_vector<double>() == Vec({1.0, 2.0, 3.0}), boost::test_tools::per_element());
      BOOST_TEST(ps[1].to_vector<double>() == Vec(4, 0.5), boost::test_tools::per_element());
      BOOST_TEST(opt->step_count(0) == 0);
      BOOST_TEST(opt->step_count(1) == 0);
      BOOST_TEST(opt->state_dict().size() == ref_opt->state_dict().size());  // options only
      // A clean step: as the first step of an optimizer that never saw the skipped one.
      for (int k = 1; k <= 2; ++k) {
        set_grads(ps, k);
        set_grads(ref, k);
        scaler.unscale(ps);
        scaler.update();
        opt->step();
        ref_opt->step();
      }
      for (size_t i = 0; i < ps.size(); ++i) {
        BOOST_TEST(ps[i].to_vector<double>() == ref[i].to_vector<double>(), boost::test_tools::per_element());
        BOOST_TEST(opt->step_count(i) == 2);
      }
      // A gradient set afresh carries no flag: it is stepped.
      ps[0].set_grad(make({std::numeric_limits<double>::infinity(), 0.0, 0.0}));
      opt->step();
      BOOST_TEST(opt->step_count(0) == 3);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
