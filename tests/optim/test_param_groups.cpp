// Parameter groups: hyper-parameters per group, the weight-decay split,
// per-group learning rates under the schedulers, and checkpoints of grouped
// optimizers. The reference for a grouped optimizer is one optimizer per
// group with that group's options, run on the same gradients.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <numbers>
#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "mixgrad/ops/creation.hpp"

namespace mg = mixgrad;
namespace optim = mixgrad::optim;

namespace {

// A weight matrix, a bias and a norm weight, as a small layer has them.
std::vector<mg::Tensor> layer_params() {
  return {mg::tensor({0.5, -1.0, 2.0, 0.25, 1.5, -0.75}, {2, 3}), mg::tensor({0.1, -0.2}, {2}),
          mg::tensor({1.0, 1.0, 1.0}, {3})};
}

std::vector<mg::Tensor> clones(const std::vector<mg::Tensor>& ps) {
  std::vector<mg::Tensor> out;
  for (const auto& p : ps) out.push_back(p.clone());
  return out;
}

// Deterministic gradients that change from step to step.
void set_grads(const std::vector<mg::Tensor>& ps, int step) {
  for (size_t i = 0; i < ps.size(); ++i) {
    std::vector<double> g(static_cast<size_t>(ps[i].numel()));
    for (size_t j = 0; j < g.size(); ++j) g[j] = std::sin(1.0 + 0.7 * step + 1.3 * i + 0.4 * j);
    ps[i].set_grad(mg::tensor(g, ps[i].shape()));
  }
}

void check_equal(const std::vector<mg::Tensor>& a, const std::vector<mg::Tensor>& b) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    BOOST_TEST(a[i].to_vector<double>() == b[i].to_vector<double>(), boost::test_tools::per_element());
}

template <class F>
void check_value_error(F&& f, const std::string& fragment) {
  try {
    f();
    BOOST_FAIL("expected ValueError containing '" + fragment + "'");
  } catch (const mg::ValueError& e) {
    BOOST_TEST(std::string(e.what()).find(fragment) != std::string::npos, e.what());
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(param_groups)

BOOST_AUTO_TEST_CASE(weight_decay_groups_split_matrices_from_biases_and_norms) {
  const auto ps = layer_params();
  const auto groups = optim::weight_decay_groups(ps, 0.1);
  BOOST_REQUIRE_EQUAL(groups.size(), 2u);
  BOOST_REQUIRE_EQUAL(groups[0].params.size(), 1u);
  BOOST_TEST(groups[0].params[0].impl() == ps[0].impl());
  BOOST_TEST(groups[0].options.at("weight_decay") == 0.1);
  BOOST_REQUIRE_EQUAL(groups[1].params.size(), 2u);
  BOOST_TEST(groups[1].params[0].impl() == ps[1].impl());
  BOOST_TEST(groups[1].params[1].impl() == ps[2].impl());
  BOOST_TEST(groups[1].options.at("weight_decay") == 0.0);
}

BOOST_AUTO_TEST_CASE(a_grouped_adamw_equals_one_adamw_per_group) {
  auto grouped = layer_params();
  auto decay = std::vector<mg::Tensor>{grouped[0].clone()};
  auto no_decay = std::vector<mg::Tensor>{grouped[1].clone(), grouped[2].clone()};
  optim::AdamW opt(optim::weight_decay_groups(grouped, 0.5), {.lr = 0.05});
  optim::AdamW ref_decay(decay, {.lr = 0.05, .weight_decay = 0.5});
  optim::AdamW ref_no_decay(no_decay, {.lr = 0.05, .weight_decay = 0.0});
  BOOST_TEST(opt.num_param_groups() == 2u);
  for (int s = 0; s < 4; ++s) {
    set_grads(grouped, s);
    // The same gradients, in the grouped order: [matrix], [bias, norm weight].
    decay[0].set_grad(grouped[0].grad().clone());
    no_decay[0].set_grad(grouped[1].grad().clone());
    no_decay[1].set_grad(grouped[2].grad().clone());
    opt.step().clear_grad();
    ref_decay.step().clear_grad();
    ref_no_decay.step().clear_grad();
  }
  check_equal({grouped[0]}, decay);
  check_equal({grouped[1], grouped[2]}, no_decay);
  // The decay made a difference: without it the matrix would equal a run with no decay.
  auto plain = std::vector<mg::Tensor>{layer_params()[0]};
  optim::AdamW ref_plain(plain, {.lr = 0.05, .weight_decay = 0.0});
  for (int s = 0; s < 4; ++s) {
    set_grads(plain, s);
    ref_plain.step().clear_grad();
  }
  BOOST_TEST(std::abs(plain[0].to_vector<double>()[2] - grouped[0].to_vector<double>()[2]) > 1e-3);
}

BOOST_AUTO_TEST_CASE(a_grouped_sgd_takes_lr_and_momentum_per_group) {
  auto grouped = layer_params();
  auto a = std::vector<mg::Tensor>{grouped[0].clone(), grouped[1].clone()};
  auto b = std::vector<mg::Tensor>{grouped[2].clone()};
  optim::SGD opt({{{grouped[0], grouped[1]}, {{"lr", 0.01}}}, {{grouped[2]}, {{"momentum", 0.0}}}},
                 {.lr = 0.1, .momentum = 0.9});
  optim::SGD ref_a(a, {.lr = 0.01, .momentum = 0.9});
  optim::SGD ref_b(b, {.lr = 0.1, .momentum = 0.0});
  BOOST_TEST(opt.lr(0) == 0.01);
  BOOST_TEST(opt.lr(1) == 0.1);
  BOOST_TEST(opt.hyperparameter(1, "momentum") == 0.0);
  BOOST_TEST(opt.param_group(1).size() == 1u);
  for (int s = 0; s < 3; ++s) {
    set_grads(grouped, s);
    a[0].set_grad(grouped[0].grad().clone());
    a[1].set_grad(grouped[1].grad().clone());
    b[0].set_grad(grouped[2].grad().clone());
    opt.step().clear_grad();
    ref_a.step().clear_grad();
    ref_b.step().clear_grad();
  }
  check_equal({grouped[0], grouped[1]}, a);
  check_equal({grouped[2]}, b);
  // Group 1 has no momentum, so no momentum buffer in its state.
  const auto dict = opt.state_dict();
  BOOST_TEST(dict.contains("state.0.momentum_buffer"));
  BOOST_TEST(!dict.contains("state.2.momentum_buffer"));
}

BOOST_AUTO_TEST_CASE(bad_groups_are_refused_with_the_group_named) {
  const auto ps = layer_params();
  check_value_error([&] { optim::AdamW({{{ps[0]}, {{"momentum", 0.9}}}}); }, "unknown option 'momentum'");
  check_value_error([&] { optim::SGD({{{ps[0]}, {}}, {{ps[1]}, {{"lr", -1.0}}}}); }, "parameter group 1");
  check_value_error([&] { optim::SGD({{{ps[0]}, {}}, {{ps[0]}, {}}}); }, "more than once");
  check_value_error([&] { optim::SGD(std::vector<optim::ParamGroup>{{{}, {}}}); }, "empty parameter list");
  // An empty group next to a full one is fine (a model without biases).
  optim::SGD ok({{{ps[0]}, {}}, {{}, {{"lr", 0.5}}}});
  BOOST_TEST(ok.num_param_groups() == 2u);
}

BOOST_AUTO_TEST_CASE(lr_setters_act_on_all_groups_or_one) {
  const auto ps = layer_params();
  optim::Adam opt({{{ps[0]}, {{"lr", 0.01}}}, {{ps[1], ps[2]}, {}}}, {.lr = 0.1});
  opt.set_lr(0.2);
  BOOST_TEST(opt.lr(0) == 0.2);
  BOOST_TEST(opt.lr(1) == 0.2);
  opt.set_lr(1, 0.3);
  BOOST_TEST(opt.lr(0) == 0.2);
  BOOST_TEST(opt.lr(1) == 0.3);
  opt.set_hyperparameter(0, "weight_decay", 0.25);
  BOOST_TEST(opt.hyperparameter(0, "weight_decay") == 0.25);
  BOOST_TEST(opt.options().weight_decay == 0.25);
  check_value_error([&] { opt.set_hyperparameter(0, "beta1", 1.5); }, "betas.first");
  BOOST_TEST(opt.hyperparameter(0, "beta1") == 0.9);  // unchanged
  check_value_error([&] { opt.set_lr(2, 0.1); }, "parameter group 2 of 2");
  check_value_error([&] { (void)opt.hyperparameter(0, "momentum"); }, "no option 'momentum'");
}

BOOST_AUTO_TEST_CASE(a_grouped_state_dict_round_trips_and_refuses_other_groupings) {
  auto pa = layer_params();
  optim::AdamW a(optim::weight_decay_groups(pa, 0.3), {.lr = 0.02});
  a.set_lr(1, 0.04);
  for (int s = 0; s < 2; ++s) {
    set_grads(pa, s);
    a.step().clear_grad();
  }
  const mg::StateDict dict = a.state_dict();
  BOOST_TEST(dict.contains("param_groups.sizes"));
  BOOST_TEST(dict.at("param_groups.1.lr").item<double>() == 0.04);
  BOOST_TEST(dict.at("options.weight_decay").item<double>() == 0.3);

  auto pb = clones(pa);
  optim::AdamW b(optim::weight_decay_groups(pb, 0.0));  // the dict brings the options
  b.load_state_dict(dict);
  BOOST_TEST(b.lr(1) == 0.04);
  BOOST_TEST(b.hyperparameter(0, "weight_decay") == 0.3);
  set_grads(pa, 5);
  set_grads(pb, 5);
  a.step();
  b.step();
  check_equal(pa, pb);

  // One group of three is not two groups of one and two: nothing loads.
  auto pc = clones(pa);
  optim::AdamW c(pc, {.lr = 0.7});
  check_value_error([&] { c.load_state_dict(dict); }, "sizes [1, 2]");
  BOOST_TEST(c.lr() == 0.7);
  check_value_error([&] { b.load_state_dict(c.state_dict()); }, "sizes [3]");
  BOOST_TEST(b.lr(1) == 0.04);
}

BOOST_AUTO_TEST_CASE(schedulers_move_each_group_from_its_own_base_lr) {
  const auto ps = layer_params();
  optim::SGD opt({{{ps[0]}, {{"lr", 0.1}}}, {{ps[1], ps[2]}, {{"lr", 0.01}}}});
  const double eta_min = 0.001;
  const int64_t T = 10;
  optim::CosineAnnealingLR sched(opt, T, eta_min);
  BOOST_TEST(sched.base_lrs() == std::vector<double>({0.1, 0.01}), boost::test_tools::per_element());
  const auto cosine = [&](double base, int64_t n) {
    return eta_min + (base - eta_min) * (1 + std::cos(std::numbers::pi * static_cast<double>(n) / T)) / 2;
  };
  for (int64_t n = 1; n <= 4; ++n) {
    sched.step();
    BOOST_TEST(opt.lr(0) == cosine(0.1, n), boost::test_tools::tolerance(1e-15));
    BOOST_TEST(opt.lr(1) == cosine(0.01, n), boost::test_tools::tolerance(1e-15));
  }
  BOOST_TEST(sched.last_lr() == opt.lr(0));

  // A checkpoint keeps both base lrs; a resumed schedule continues both groups.
  const mg::StateDict dict = sched.state_dict();
  BOOST_TEST(dict.at("base_lr.1").item<double>() == 0.01);
  const auto qs = layer_params();
  optim::SGD opt2({{{qs[0]}, {{"lr", 0.5}}}, {{qs[1], qs[2]}, {{"lr", 0.5}}}});
  optim::CosineAnnealingLR sched2(opt2, T, eta_min);
  sched2.load_state_dict(dict);
  BOOST_TEST(opt2.lr(1) == cosine(0.01, 4), boost::test_tools::tolerance(1e-15));
  sched2.step();
  BOOST_TEST(opt2.lr(0) == cosine(0.1, 5), boost::test_tools::tolerance(1e-15));
  // The dict of a one-group schedule lacks base_lr.1: refused, nothing changed.
  const auto rs = layer_params();
  optim::SGD single(rs, {.lr = 0.1});
  optim::CosineAnnealingLR one(single, T, eta_min);
  check_value_error([&] { sched2.load_state_dict(one.state_dict()); }, "missing key \"base_lr.1\"");
  BOOST_TEST(opt2.lr(0) == cosine(0.1, 5), boost::test_tools::tolerance(1e-15));
}

BOOST_AUTO_TEST_CASE(a_sequential_warmup_and_cosine_schedules_every_group) {
  const auto ps = layer_params();
  optim::AdamW opt(optim::weight_decay_groups(ps, 0.1), {.lr = 1e-3});
  opt.set_lr(1, 2e-3);
  auto warm = std::make_shared<optim::LinearLR>(opt, 0.1, 1.0, 5);
  auto cos = std::make_shared<optim::CosineAnnealingLR>(opt, 20);
  optim::SequentialLR sched(opt, {warm, cos}, {5});
  BOOST_TEST(opt.lr(0) == 1e-4, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(opt.lr(1) == 2e-4, boost::test_tools::tolerance(1e-12));
  for (int i = 0; i < 5; ++i) sched.step();
  BOOST_TEST(opt.lr(0) == 1e-3, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(opt.lr(1) == 2e-3, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_SUITE_END()
