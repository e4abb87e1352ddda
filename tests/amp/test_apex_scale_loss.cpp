// amp::scale_loss after amp::initialize, apex's behaviours: O1 and O2 equal
// the hand-written mixgrad loops bit for bit; O3 checks nothing; several
// models, optimizers and losses (tests/L0/run_amp/
// test_multiple_models_optimizers_losses.py, the DCGAN pattern); overflow
// skips the step and backs the scale off, per loss (test_checkpointing.py's
// test_loss_scale_decrease); a checkpoint mid-training continues identically
// (test_restoring); and every refused call changes nothing.
#include <boost/test/unit_test.hpp>

#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "apex_test_util.hpp"

namespace mg = mixgrad;
namespace nn = mixgrad::nn;
using mg::DType;
using namespace apextest;

namespace {

struct Batch {
  mg::Tensor x, target;
};

// `n` batches for ConvNet; those listed in `poison` overflow.
std::vector<Batch> batches(int n, std::vector<int> poison = {}) {
  std::vector<Batch> out;
  for (int i = 0; i < n; ++i) {
    Batch b{batch(), mg::normal({4, 6, 6, 6})};
    if (std::find(poison.begin(), poison.end(), i) != poison.end()) b.x = poisoned(b.x);
    out.push_back(b);
  }
  return out;
}

mg::Tensor mse(const mg::Tensor& y, const mg::Tensor& target) {
  return mg::F::mse_loss(mg::F::astype(y, DType::float32), target);
}

// One apex step: zero_grad, forward, scale_loss around the backward, step.
void apex_step(nn::Module& net, mg::optim::Optimizer& opt, mg::autodiff::GradManager& gm, const Batch& b,
               int loss_id = 0) {
  opt.zero_grad();
  auto rec = gm.record();
  const mg::Tensor loss = mse(net(b.x), b.target);
  mg::amp::scale_loss(loss, opt, [&](const mg::Tensor& scaled) { gm.backward(scaled); }, loss_id);
  opt.step();
}

mg::optim::SGDOptions sgd() { return {.lr = 0.05, .momentum = 0.9}; }

}  // namespace

BOOST_AUTO_TEST_SUITE(apex_scale_loss)

BOOST_AUTO_TEST_CASE(o1_equals_autocast_and_the_grad_scaler_bit_for_bit) {
  const auto data = batches(5, {2});
  mg::manual_seed(11);
  ConvNet ref;
  mg::optim::SGD ref_opt(ref.parameters(), sgd());
  mg::amp::GradScaler scaler(apex_dynamic());
  mg::autodiff::GradManager ref_gm;
  ref_gm.attach(ref.parameters());

  mg::manual_seed(11);
  ConvNet net;
  mg::optim::SGD opt(net.parameters(), sgd());
  mg::amp::Amp amp = mg::amp::initialize(net, opt, {.opt_level = "O1"});
  mg::autodiff::GradManager gm;
  gm.attach(net.parameters());

  for (size_t i = 0; i < data.size(); ++i) {
    BOOST_TEST_CONTEXT("step " << i) {
      {
        mg::amp::autocast scope;
        auto rec = ref_gm.record();
        scaler.backward(ref_gm, mse(ref(data[i].x), data[i].target));
      }
      ref_opt.step().clear_grad();
      apex_step(net, opt, gm, data[i]);
      BOOST_TEST((values_of(net.parameters()) == values_of(ref.parameters())));
      BOOST_TEST(amp.loss_scale(0) == scaler.scale_factor());
    }
  }
  BOOST_TEST(amp.loss_scale(0) == 32768.0);  // the overflow at step 2 halved it
  BOOST_TEST(all_finite(net.parameters()));
}

BOOST_AUTO_TEST_CASE(o2_equals_module_to_and_master_weights_by_hand_bit_for_bit) {
  const auto data = batches(5, {1});
  mg::manual_seed(12);
  ConvNet ref;
  ref.to(DType::bfloat16, {.keep_batch_norm_fp32 = true});
  mg::optim::SGD ref_opt(ref.parameters(), {.lr = 0.05, .momentum = 0.9, .master_weights = true});
  mg::amp::GradScaler scaler(apex_dynamic());
  mg::autodiff::GradManager ref_gm;
  ref_gm.attach(ref.parameters());

  mg::manual_seed(12);
  ConvNet net;
  mg::optim::SGD opt(net.parameters(), sgd());
  mg::amp::Amp amp = mg::amp::initialize(net, opt, {.opt_level = "O2"});
  mg::autodiff::GradManager gm;
  gm.attach(net.parameters());
  BOOST_TEST((values_of(net.parameters()) == values_of(ref.parameters())));

  for (size_t i = 0; i < data.size(); ++i) {
    BOOST_TEST_CONTEXT("step " << i) {
      {
        auto rec = ref_gm.record();
        scaler.backward(ref_gm, mse(ref(mg::F::astype(data[i].x, DType::bfloat16)), data[i].target));
      }
      ref_opt.step().clear_grad();
      apex_step(net, opt, gm, data[i]);
      BOOST_TEST((values_of(net.parameters()) == values_of(ref.parameters())));
      for (size_t p = 0; p < net.parameters().size(); ++p)
        BOOST_TEST((values_of({opt.master_weight(p)}) == values_of({ref_opt.master_weight(p)})));
      BOOST_TEST(amp.loss_scale(0) == scaler.scale_factor());
    }
  }
  BOOST_TEST(amp.loss_scale(0) == 32768.0);
}

BOOST_AUTO_TEST_CASE(o3_is_pure_16_bit_and_checks_nothing_as_apex_unless_the_scale_is_dynamic) {
  const auto data = batches(2, {1});
  mg::manual_seed(13);
  ConvNet net;
  mg::optim::SGD opt(net.parameters(), sgd());
  mg::autodiff::GradManager gm;
  gm.attach(net.parameters());
  {
    mg::amp::Amp amp = mg::amp::initialize(net, opt, {.opt_level = "O3"});
    apex_step(net, opt, gm, data[0]);
    BOOST_TEST(all_finite(net.parameters()));
    // An overflow is not caught: apex's O3 applies it.
    apex_step(net, opt, gm, data[1]);
    BOOST_TEST(!all_finite(net.parameters()));
    const auto e = entries(mg::amp::state_dict());
    BOOST_TEST((e == std::vector<std::pair<std::string, double>>{{"loss_scaler0.loss_scale", 1.0},
                                                                  {"loss_scaler0.unskipped", 0.0}}));
  }
  mg::manual_seed(13);
  ConvNet checked;
  mg::optim::SGD checked_opt(checked.parameters(), sgd());
  mg::autodiff::GradManager checked_gm;
  checked_gm.attach(checked.parameters());
  mg::amp::Amp amp = mg::amp::initialize(checked, checked_opt,
                                         {.opt_level = "O3", .loss_scale = mg::amp::LossScale::dynamic()});
  apex_step(checked, checked_opt, checked_gm, data[0]);
  const Values before = values_of(checked.parameters());
  apex_step(checked, checked_opt, checked_gm, data[1]);
  BOOST_TEST((values_of(checked.parameters()) == before));  // skipped
  BOOST_TEST(amp.loss_scale(0) == 32768.0);
}

BOOST_AUTO_TEST_CASE(a_fixed_loss_scale_other_than_one_unscales_and_skips_an_overflowed_step) {
  // apex would apply the overflowed step; every mixgrad scaler skips it.
  const auto data = batches(3, {1});
  mg::manual_seed(22);
  ConvNet ref;
  ref.to(DType::bfloat16, {.keep_batch_norm_fp32 = true});
  mg::optim::SGD ref_opt(ref.parameters(), {.lr = 0.05, .momentum = 0.9, .master_weights = true});
  mg::autodiff::GradManager ref_gm;
  ref_gm.attach(ref.parameters());

  mg::manual_seed(22);
  ConvNet net;
  mg::optim::SGD opt(net.parameters(), sgd());
  mg::amp::Amp amp = mg::amp::initialize(net, opt, {.opt_level = "O2", .loss_scale = 128.0});
  mg::autodiff::GradManager gm;
  gm.attach(net.parameters());
  for (size_t i = 0; i < data.size(); ++i) {
    BOOST_TEST_CONTEXT("step " << i) {
      const Values before = values_of(net.parameters());
      apex_step(net, opt, gm, data[i]);
      BOOST_TEST(((values_of(net.parameters()) == before) == (i == 1)));  // only the overflow is skipped
      if (i != 1) {  // the clean steps equal an unscaled float32-loss run: 128 is a power of two
        {
          auto rec = ref_gm.record();
          ref_gm.backward(mse(ref(mg::F::astype(data[i].x, DType::bfloat16)), data[i].target));
        }
        ref_opt.step().clear_grad();
        BOOST_TEST((values_of(net.parameters()) == values_of(ref.parameters())));
      }
    }
  }
  BOOST_TEST((entries(amp.state_dict()) == std::vector<std::pair<std::string, double>>{
                                              {"loss_scaler0.loss_scale", 128.0}, {"loss_scaler0.unskipped", 0.0}}));
}

BOOST_AUTO_TEST_CASE(two_models_two_optimizers_two_losses_keep_separate_scales) {
  // The guide's GAN: D's loss is loss_id 0, G's loss_id 1.
  mg::manual_seed(14);
  nn::Sequential gen(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 8));
  nn::Sequential disc(nn::Linear(8, 8), nn::ReLU(), nn::Linear(8, 1));
  mg::optim::Adam opt_g(gen.parameters(), {.lr = 1e-3}), opt_d(disc.parameters(), {.lr = 1e-3});
  using Models = std::vector<std::reference_wrapper<nn::Module>>;
  using Opts = std::vector<std::reference_wrapper<mg::optim::Optimizer>>;
  mg::amp::Amp amp = mg::amp::initialize(Models{disc, gen}, Opts{opt_d, opt_g}, {.opt_level = "O2", .num_losses = 2});
  mg::autodiff::GradManager gm_d, gm_g;
  gm_d.attach(disc.parameters());
  gm_g.attach(gen.parameters());
  for (int it = 0; it < 3; ++it) {
    BOOST_TEST_CONTEXT("iteration " << it) {
      const mg::Tensor z = mg::normal({16, 4});
      const mg::Tensor real = it == 1 ? poisoned(mg::normal({16, 8})) : mg::normal({16, 8});
      const Values d_before = values_of(disc.parameters()), g_before = values_of(gen.parameters());
      opt_d.zero_grad();
      {
        auto rec = gm_d.record();
        const mg::Tensor loss_d = mg::F::mean(disc(gen(z))) - mg::F::mean(disc(real));
        mg::amp::scale_loss(loss_d, opt_d, [&](const mg::Tensor& s) { gm_d.backward(s); }, 0);
      }
      opt_d.step();
      opt_g.zero_grad();
      {
        auto rec = gm_g.record();
        const mg::Tensor loss_g = -mg::F::mean(disc(gen(z)));
        mg::amp::scale_loss(loss_g, opt_g, [&](const mg::Tensor& s) { gm_g.backward(s); }, 1);
      }
      opt_g.step();
      // The poisoned real batch overflows D's loss only: D's step is
      // skipped and its scale backs off; G's is taken at its own scale.
      BOOST_TEST(((values_of(disc.parameters()) == d_before) == (it == 1)));
      BOOST_TEST(!(values_of(gen.parameters()) == g_before));
      BOOST_TEST(amp.loss_scale(0) == (it >= 1 ? 32768.0 : 65536.0));
      BOOST_TEST(amp.loss_scale(1) == 65536.0);
    }
  }
  BOOST_TEST(all_finite(disc.parameters()));
  BOOST_TEST(all_finite(gen.parameters()));
}

BOOST_AUTO_TEST_CASE(two_scopes_into_one_optimizer_add_up_and_an_overflow_in_either_skips_the_step) {
  // DCGAN's errD_real (loss_id 0) and errD_fake (loss_id 1) before one step.
  const auto data = batches(2);
  mg::manual_seed(15);
  ConvNet ref;
  mg::autodiff::GradManager ref_gm;
  ref_gm.attach(ref.parameters());
  for (const Batch& b : data) {  // the same autocast, unscaled: the gradients accumulate
    mg::amp::autocast scope;
    auto rec = ref_gm.record();
    ref_gm.backward(mse(ref(b.x), b.target));
  }
  mg::manual_seed(15);
  ConvNet net;
  mg::optim::SGD opt(net.parameters(), sgd());
  mg::amp::Amp amp = mg::amp::initialize(net, opt, {.opt_level = "O1", .num_losses = 2});
  mg::autodiff::GradManager gm;
  gm.attach(net.parameters());
  const auto backward = [&](const Batch& b, int loss_id) {
    auto rec = gm.record();
    mg::amp::scale_loss(mse(net(b.x), b.target), opt, [&](const mg::Tensor& s) { gm.backward(s); }, loss_id);
  };
  backward(data[0], 0);
  backward(data[1], 1);
  BOOST_TEST((grads_of(net.parameters()) == grads_of(ref.parameters())));  // powers of two: exact
  for (const mg::Tensor& p : net.parameters())
    BOOST_TEST((mg::grad_scaling(p.grad()).state == mg::ScaleState::unscaled));
  opt.step();
  BOOST_TEST(!(values_of(net.parameters()) == values_of(ref.parameters())));

  // An overflow in the second scope, or in the first, skips the step.
  for (int bad : {1, 0}) {
    BOOST_TEST_CONTEXT("overflow in scope " << bad) {
      opt.zero_grad();
      const Values before = values_of(net.parameters());
      const double scale_bad = amp.loss_scale(bad), scale_good = amp.loss_scale(1 - bad);
      for (int id : {0, 1}) backward(id == bad ? Batch{poisoned(data[id].x), data[id].target} : data[id], id);
      opt.step();
      BOOST_TEST((values_of(net.parameters()) == before));
      BOOST_TEST(amp.loss_scale(bad) == scale_bad / 2);
      BOOST_TEST(amp.loss_scale(1 - bad) == scale_good);
    }
  }
}

BOOST_AUTO_TEST_CASE(each_loss_backs_off_its_own_scale_and_the_state_dict_says_so) {
  // apex's test_loss_scale_decrease: 0, 1 and 2 overflows for losses 0, 1, 2.
  for (const char* level : {"O1", "O2"}) {
    BOOST_TEST_CONTEXT(level) {
      mg::manual_seed(16);
      ConvNet net;
      mg::optim::SGD opt(net.parameters(), sgd());
      mg::amp::Amp amp = mg::amp::initialize(net, opt, {.opt_level = level, .num_losses = 3});
      mg::autodiff::GradManager gm;
      gm.attach(net.parameters());
      const Values before = values_of(net.parameters());
      const auto bad = batches(1, {0});
      for (int id = 0; id < 3; ++id)
        for (int k = 0; k < id; ++k) apex_step(net, opt, gm, bad[0], id);
      BOOST_TEST((values_of(net.parameters()) == before));  // every step skipped
      const auto e = entries(amp.state_dict());
      BOOST_TEST((e == std::vector<std::pair<std::string, double>>{{"loss_scaler0.loss_scale", 65536.0},
                                                                    {"loss_scaler0.unskipped", 0.0},
                                                                    {"loss_scaler1.loss_scale", 32768.0},
                                                                    {"loss_scaler1.unskipped", 0.0},
                                                                    {"loss_scaler2.loss_scale", 16384.0},
                                                                    {"loss_scaler2.unskipped", 0.0}}));
    }
  }
}

BOOST_AUTO_TEST_CASE(the_scale_grows_after_2000_clean_steps_up_to_max_loss_scale) {
  const auto data = batches(1);
  for (double max_scale : {0x1p24, 0x1p16}) {
    BOOST_TEST_CONTEXT("max_loss_scale " << max_scale) {
      mg::manual_seed(17);
      ConvNet net;
      mg::optim::SGD opt(net.parameters(), sgd());
      mg::amp::Amp amp = mg::amp::initialize(net, opt, {.opt_level = "O1", .max_loss_scale = max_scale});
      mg::autodiff::GradManager gm;
      gm.attach(net.parameters());
      mg::StateDict sd;
      sd.insert("loss_scaler0.loss_scale", mg::scalar(65536.0, DType::float64));
      sd.insert("loss_scaler0.unskipped", mg::scalar(1999.0, DType::int64));
      mg::amp::load_state_dict(sd);
      apex_step(net, opt, gm, data[0]);
      BOOST_TEST(amp.loss_scale(0) == std::min(max_scale, 131072.0));
      BOOST_TEST(amp.loss_scaler(0).growth_tracker() == 0);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_checkpoint_mid_training_continues_identically) {
  // apex's test_restoring, one opt level at a time: save model, optimizer
  // and amp state after 4 steps (one overflowed), restore into a new model.
  const auto data = batches(8, {2});
  mg::StateDict model_sd, opt_sd, amp_sd;
  Values final_params;
  std::vector<std::pair<std::string, double>> final_amp;
  {
    mg::manual_seed(18);
    ConvNet net;
    mg::optim::SGD opt(net.parameters(), sgd());
    mg::amp::Amp amp = mg::amp::initialize(net, opt, {.opt_level = "O2"});
    mg::autodiff::GradManager gm;
    gm.attach(net.parameters());
    for (int i = 0; i < 8; ++i) {
      apex_step(net, opt, gm, data[i]);
      if (i == 3) {
        model_sd = net.state_dict();
        opt_sd = opt.state_dict();
        amp_sd = mg::amp::state_dict();
      }
    }
    final_params = values_of(net.parameters());
    final_amp = entries(amp.state_dict());
  }
  BOOST_TEST((entries(amp_sd) == std::vector<std::pair<std::string, double>>{{"loss_scaler0.loss_scale", 32768.0},
                                                                            {"loss_scaler0.unskipped", 1.0}}));
  mg::manual_seed(99);  // other initial weights: everything must come from the checkpoint
  ConvNet net;
  mg::optim::SGD opt(net.parameters(), sgd());
  mg::amp::Amp amp = mg::amp::initialize(net, opt, {.opt_level = "O2"});
  net.load_state_dict(model_sd);
  opt.load_state_dict(opt_sd);
  mg::amp::load_state_dict(amp_sd);
  BOOST_TEST((entries(mg::amp::state_dict()) == entries(amp_sd)));  // exact round trip
  mg::autodiff::GradManager gm;
  gm.attach(net.parameters());
  for (int i = 4; i < 8; ++i) apex_step(net, opt, gm, data[i]);
  BOOST_TEST((values_of(net.parameters()) == final_params));
  BOOST_TEST((entries(amp.state_dict()) == final_amp));
}

BOOST_AUTO_TEST_CASE(bad_amp_state_dicts_are_refused_before_anything_loads) {
  mg::manual_seed(19);
  ConvNet net;
  mg::optim::SGD opt(net.parameters());
  mg::amp::Amp amp = mg::amp::initialize(net, opt, {.opt_level = "O1", .num_losses = 2});
  const auto before = entries(amp.state_dict());
  const auto with = [](std::vector<std::pair<std::string, mg::Tensor>> items) {
    mg::StateDict d;
    for (auto& [k, t] : items) d.insert(k, t);
    return d;
  };
  const auto f64 = [](double v) { return mg::scalar(v, DType::float64); };
  const auto i64 = [](double v) { return mg::scalar(v, DType::int64); };
  const auto good0 = std::pair{std::string("loss_scaler0.loss_scale"), f64(1024.0)};
  const auto good0u = std::pair{std::string("loss_scaler0.unskipped"), i64(5)};
  const auto good1 = std::pair{std::string("loss_scaler1.loss_scale"), f64(2048.0)};
  const auto good1u = std::pair{std::string("loss_scaler1.unskipped"), i64(6)};
  // One scaler only, one too many, a missing entry, values out of range or of the wrong form.
  BOOST_CHECK_THROW(mg::amp::load_state_dict(with({good0, good0u})), mg::ValueError);
  BOOST_CHECK_THROW(mg::amp::load_state_dict(with({good0, good0u, good1, good1u,
                                                   {"loss_scaler2.loss_scale", f64(1.0)}})),
                    mg::ValueError);
  BOOST_CHECK_THROW(mg::amp::load_state_dict(with({good0, good0u, good1})), mg::ValueError);
  BOOST_CHECK_THROW(mg::amp::load_state_dict(with({good0, good0u, {"loss_scaler1.loss_scale", f64(0x1p25)}, good1u})),
                    mg::ValueError);  // above max_loss_scale
  BOOST_CHECK_THROW(mg::amp::load_state_dict(with({good0, good0u, good1, {"loss_scaler1.unskipped", i64(2000)}})),
                    mg::ValueError);
  BOOST_CHECK_THROW(mg::amp::load_state_dict(with({good0, good0u, good1, {"loss_scaler1.unskipped", f64(2.5)}})),
                    mg::ValueError);
  BOOST_CHECK_THROW(mg::amp::load_state_dict(with({good0, good0u, {"loss_scaler1.loss_scale", mg::ones({2})},
                                                   good1u})),
                    mg::ShapeError);
  BOOST_TEST((entries(amp.state_dict()) == before));  // scaler 0 was valid each time, and not loaded
  mg::amp::load_state_dict(with({good0, good0u, good1, good1u}));
  BOOST_TEST((entries(amp.state_dict()) == std::vector<std::pair<std::string, double>>{
                                               {"loss_scaler0.loss_scale", 1024.0}, {"loss_scaler0.unskipped", 5.0},
                                               {"loss_scaler1.loss_scale", 2048.0}, {"loss_scaler1.unskipped", 6.0}}));
}

BOOST_AUTO_TEST_CASE(refused_scale_loss_calls_change_nothing) {
  mg::manual_seed(20);
  ConvNet net;
  mg::optim::SGD opt(net.parameters(), sgd());
  mg::optim::SGD stranger(ConvNet().parameters());
  mg::amp::Amp amp = mg::amp::initialize(net, opt, {.opt_level = "O2", .num_losses = 2});
  mg::autodiff::GradManager gm;
  gm.attach(net.parameters());
  const auto data = batches(2);
  apex_step(net, opt, gm, data[0]);
  // Gradients left from a scope, not stepped yet: what a refused call must keep.
  {
    auto rec = gm.record();
    mg::amp::scale_loss(mse(net(data[1].x), data[1].target), opt, [&](const mg::Tensor& s) { gm.backward(s); });
  }
  const Values params = values_of(net.parameters()), grads = grads_of(net.parameters());
  const auto amp_state = entries(amp.state_dict());
  const auto unchanged = [&] {
    BOOST_TEST((values_of(net.parameters()) == params));
    BOOST_TEST((grads_of(net.parameters()) == grads));
    BOOST_TEST((entries(amp.state_dict()) == amp_state));
  };
  auto rec = gm.record();
  const mg::Tensor loss = mse(net(data[0].x), data[0].target);
  BOOST_CHECK_THROW((void)mg::amp::scale_loss(loss, opt, 2), mg::ValueError);
  unchanged();
  BOOST_CHECK_THROW((void)mg::amp::scale_loss(loss, opt, -1), mg::ValueError);
  unchanged();
  BOOST_CHECK_THROW((void)mg::amp::scale_loss(loss, stranger), mg::StateError);
  unchanged();
  BOOST_CHECK_THROW((void)mg::amp::scale_loss(loss, mg::amp::Optimizers{}), mg::ValueError);
  unchanged();
  BOOST_CHECK_THROW((void)mg::amp::scale_loss(loss, mg::amp::Optimizers{opt, opt}), mg::ValueError);
  unchanged();
  BOOST_CHECK_THROW((void)mg::amp::scale_loss(mg::zeros({}, DType::int64), opt), mg::DTypeError);
  unchanged();
  BOOST_CHECK_THROW((void)mg::amp::scale_loss(mg::Tensor(), opt), mg::DTypeError);
  unchanged();
  {
    mg::amp::ScaledLoss outer = mg::amp::scale_loss(loss, opt, 1);
    BOOST_CHECK_THROW((void)mg::amp::scale_loss(loss, opt), mg::StateError);  // one scope per optimizer
    outer.finish();  // nothing was backpropagated: the gradients set aside come back
  }
  BOOST_TEST((grads_of(net.parameters()) == grads));
}

BOOST_AUTO_TEST_CASE(the_scope_object_finishes_at_its_end_and_abandons_on_an_exception) {
  const auto data = batches(3);
  mg::manual_seed(21);
  ConvNet a;
  mg::manual_seed(21);
  ConvNet b;
  mg::optim::SGD opt_a(a.parameters(), sgd()), opt_b(b.parameters(), sgd());
  using Models = std::vector<std::reference_wrapper<nn::Module>>;
  using Opts = std::vector<std::reference_wrapper<mg::optim::Optimizer>>;
  mg::amp::Amp amp = mg::amp::initialize(Models{a, b}, Opts{opt_a, opt_b}, {.opt_level = "O2", .num_losses = 2});
  mg::autodiff::GradManager gm_a, gm_b;
  gm_a.attach(a.parameters());
  gm_b.attach(b.parameters());
  // The callable and the object give the same gradients and scaler steps.
  {
    auto rec = gm_a.record();
    mg::amp::scale_loss(mse(a(data[0].x), data[0].target), opt_a, [&](const mg::Tensor& s) { gm_a.backward(s); }, 0);
  }
  {
    auto rec = gm_b.record();
    mg::amp::ScaledLoss scaled = mg::amp::scale_loss(mse(b(data[0].x), data[0].target), opt_b, 1);
    gm_b.backward(scaled.loss());
  }  // its end unscales and updates
  BOOST_TEST((grads_of(a.parameters()) == grads_of(b.parameters())));
  BOOST_TEST((entries(amp.loss_scaler(0).state_dict()) == entries(amp.loss_scaler(1).state_dict())));

  const Values grads = grads_of(b.parameters());
  const auto scaler_state = entries(amp.loss_scaler(1).state_dict());
  const auto unchanged = [&] {
    BOOST_TEST((grads_of(b.parameters()) == grads));
    BOOST_TEST((entries(amp.loss_scaler(1).state_dict()) == scaler_state));
  };
  // An exception in the body: it propagates, nothing is applied.
  {
    auto rec = gm_b.record();
    const mg::Tensor loss = mse(b(data[1].x), data[1].target);
    BOOST_CHECK_THROW(mg::amp::scale_loss(loss, opt_b,
                                          [&](const mg::Tensor& s) {
                                            gm_b.backward(s);
                                            throw std::runtime_error("user code");
                                          },
                                          1),
                      std::runtime_error);
  }
  unchanged();
  // A backward on the unscaled loss: finish() refuses it and puts everything back.
  {
    auto rec = gm_b.record();
    const mg::Tensor loss = mse(b(data[1].x), data[1].target);
    mg::amp::ScaledLoss scaled = mg::amp::scale_loss(loss, opt_b, 1);
    gm_b.backward(loss);
    BOOST_CHECK_THROW(scaled.finish(), mg::StateError);
    BOOST_TEST(scaled.finished());
    BOOST_CHECK_THROW(scaled.finish(), mg::StateError);
    BOOST_CHECK_THROW((void)scaled.loss(), mg::StateError);
  }
  unchanged();
  // The same mistake left to the destructor: no throw there; the next call throws it.
  {
    auto rec = gm_b.record();
    const mg::Tensor loss = mse(b(data[1].x), data[1].target);
    mg::amp::ScaledLoss scaled = mg::amp::scale_loss(loss, opt_b, 1);
    gm_b.backward(loss);
  }
  unchanged();
  try {
    (void)mg::amp::scale_loss(mg::ones({}), opt_b, 1);
    BOOST_FAIL("the destructor's error must be thrown by the next call");
  } catch (const mg::StateError& e) {
    BOOST_TEST(std::string(e.what()).find("destructor") != std::string::npos);
  }
  unchanged();
  // Thrown once; amp works on.
  {
    auto rec = gm_b.record();
    mg::amp::scale_loss(mse(b(data[2].x), data[2].target), opt_b, [&](const mg::Tensor& s) { gm_b.backward(s); }, 1);
  }
  opt_b.step();
  BOOST_TEST(all_finite(b.parameters()));
}

BOOST_AUTO_TEST_CASE(a_scope_may_end_after_its_handle) {
  const auto data = batches(2);
  mg::manual_seed(23);
  ConvNet net;
  mg::optim::SGD opt(net.parameters(), sgd());
  mg::autodiff::GradManager gm;
  gm.attach(net.parameters());
  std::optional<mg::amp::Amp> amp(mg::amp::initialize(net, opt, {.opt_level = "O2"}));
  {
    auto rec = gm.record();
    mg::amp::ScaledLoss scaled = mg::amp::scale_loss(mse(net(data[0].x), data[0].target), opt);
    gm.backward(scaled.loss());
    amp.reset();      // the handle goes first: the state ends ...
    scaled.finish();  // ... but the open scope still ends properly
  }
  for (const mg::Tensor& p : net.parameters())
    BOOST_TEST((mg::grad_scaling(p.grad()).state == mg::ScaleState::unscaled));
  BOOST_CHECK_THROW(mg::amp::state_dict(), mg::StateError);

  // An end that fails in the destructor with no handle left goes to standard error.
  ConvNet net2;
  mg::optim::SGD opt2(net2.parameters(), sgd());
  mg::autodiff::GradManager gm2;
  gm2.attach(net2.parameters());
  amp.emplace(mg::amp::initialize(net2, opt2, {.opt_level = "O2"}));
  std::ostringstream err;
  std::streambuf* old = std::cerr.rdbuf(err.rdbuf());
  {
    auto rec = gm2.record();
    const mg::Tensor loss = mse(net2(data[1].x), data[1].target);
    mg::amp::ScaledLoss scaled = mg::amp::scale_loss(loss, opt2);
    gm2.backward(loss);  // not the scaled loss
    amp.reset();
  }
  std::cerr.rdbuf(old);
  BOOST_TEST(err.str().find("could not finish") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
