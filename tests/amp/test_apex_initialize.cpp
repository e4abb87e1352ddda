// amp::initialize, apex's front end: the opt levels' property table and
// apex's refusals, what each level does to models and optimizers (apex's
// tests/L0/run_amp/test_basic_casts.py and test_checkpointing.py's
// test_state_dict), the handle's life, and refused calls that change nothing.
#include <boost/test/unit_test.hpp>

#include "apex_test_util.hpp"

namespace mg = mixgrad;
namespace nn = mixgrad::nn;
using mg::DType;
using namespace apextest;

namespace {

// Parameters and buffers of a ConvNet: values and dtypes, exactly.
Values state_of(const nn::Module& m) {
  std::vector<mg::Tensor> all = m.parameters();
  for (const mg::Tensor& b : m.buffers()) all.push_back(b);
  return values_of(all);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(apex_initialize)

BOOST_AUTO_TEST_CASE(opt_levels_resolve_to_apex_property_table) {
  using mg::amp::resolve_properties;
  const auto o0 = resolve_properties({.opt_level = "O0"});
  BOOST_TEST((o0.cast_model_type == std::optional(DType::float32)));
  BOOST_TEST(!o0.patch_functions);
  BOOST_TEST(!o0.keep_batchnorm_fp32.has_value());
  BOOST_TEST((o0.master_weights == std::optional(false)));
  BOOST_TEST((o0.loss_scale == mg::amp::LossScale(1.0)));

  const auto o1 = resolve_properties({.opt_level = "O1"});
  BOOST_TEST(!o1.cast_model_type.has_value());
  BOOST_TEST(o1.patch_functions);
  BOOST_TEST(!o1.keep_batchnorm_fp32.has_value());
  BOOST_TEST(!o1.master_weights.has_value());
  BOOST_TEST(o1.loss_scale.is_dynamic());

  const auto o2 = resolve_properties({.opt_level = "O2"});
  BOOST_TEST((o2.cast_model_type == std::optional(DType::bfloat16)));  // the CPU's 16-bit dtype
  BOOST_TEST(!o2.patch_functions);
  BOOST_TEST((o2.keep_batchnorm_fp32 == std::optional(true)));
  BOOST_TEST((o2.master_weights == std::optional(true)));
  BOOST_TEST(o2.loss_scale.is_dynamic());

  const auto o3 = resolve_properties({.opt_level = "O3"});
  BOOST_TEST((o3.cast_model_type == std::optional(DType::bfloat16)));
  BOOST_TEST((o3.keep_batchnorm_fp32 == std::optional(false)));
  BOOST_TEST((o3.master_weights == std::optional(false)));
  BOOST_TEST((o3.loss_scale == mg::amp::LossScale(1.0)));

  // The library's convention for the 16-bit dtype: float16 for CUDA models,
  // or the one the user names.
  BOOST_TEST((resolve_properties({.opt_level = "O2"}, mg::DeviceType::cuda).cast_model_type ==
             std::optional(DType::float16)));
  BOOST_TEST((resolve_properties({.opt_level = "O3", .low_prec_dtype = DType::float16}).cast_model_type ==
             std::optional(DType::float16)));
  BOOST_TEST(mg::amp::describe(o2).find("opt_level              : O2") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(overrides_apply_and_those_apex_refuses_are_value_errors) {
  using mg::amp::resolve_properties;
  // Accepted overrides (apex's "permissible invocations").
  BOOST_TEST((resolve_properties({.opt_level = "O2", .keep_batchnorm_fp32 = false}).keep_batchnorm_fp32 ==
             std::optional(false)));
  BOOST_TEST((resolve_properties({.opt_level = "O3", .keep_batchnorm_fp32 = true}).keep_batchnorm_fp32 ==
             std::optional(true)));
  BOOST_TEST(resolve_properties({.opt_level = "O2", .loss_scale = 128.0}).loss_scale.value() == 128.0);
  BOOST_TEST(resolve_properties({.opt_level = "O3", .loss_scale = mg::amp::LossScale::dynamic()})
                 .loss_scale.is_dynamic());
  BOOST_TEST((resolve_properties({.opt_level = "O1", .cast_model_type = DType::float32}).cast_model_type ==
             std::optional(DType::float32)));
  BOOST_TEST(!resolve_properties({.opt_level = "O1", .patch_functions = false}).patch_functions);

  // Refused, as apex's Properties refuses them.
  BOOST_CHECK_THROW(resolve_properties({.opt_level = "O4"}), mg::ValueError);
  BOOST_CHECK_THROW(resolve_properties({.opt_level = "o1"}), mg::ValueError);
  BOOST_CHECK_THROW(resolve_properties({.opt_level = "O1", .cast_model_type = DType::bfloat16}), mg::ValueError);
  BOOST_CHECK_THROW(resolve_properties({.opt_level = "O1", .keep_batchnorm_fp32 = true}), mg::ValueError);
  BOOST_CHECK_THROW(resolve_properties({.opt_level = "O1", .master_weights = false}), mg::ValueError);
  BOOST_CHECK_THROW(resolve_properties({.opt_level = "O2", .patch_functions = true}), mg::ValueError);
  BOOST_CHECK_THROW(resolve_properties({.opt_level = "O0", .patch_functions = true}), mg::ValueError);
  // Dtypes out of place.
  BOOST_CHECK_THROW(resolve_properties({.opt_level = "O2", .low_prec_dtype = DType::float32}), mg::DTypeError);
  BOOST_CHECK_THROW(resolve_properties({.opt_level = "O2", .cast_model_type = DType::int32}), mg::DTypeError);
  try {
    resolve_properties({.opt_level = "O1", .master_weights = true});
    BOOST_FAIL("O1 with master weights must be refused");
  } catch (const mg::ValueError& e) {
    BOOST_TEST(std::string(e.what()).find("master_weights") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(basic_casts_per_opt_level) {
  for (const char* level : {"O0", "O1", "O2", "O3"}) {
    BOOST_TEST_CONTEXT(level) {
      mg::manual_seed(1);
      ConvNet net;
      mg::optim::SGD opt(net.parameters(), {.lr = 0.01});
      mg::amp::Amp amp = mg::amp::initialize(net, opt, {.opt_level = level});
      const std::string l = level;
      const DType weights = (l == "O2" || l == "O3") ? DType::bfloat16 : DType::float32;
      const DType bn = l == "O3" ? DType::bfloat16 : DType::float32;  // O2 keeps batch norm float32
      BOOST_TEST(net.param.dtype() == weights);
      BOOST_TEST(net.conv1->parameters()[0].dtype() == weights);
      for (const mg::Tensor& t : net.bn1->parameters()) BOOST_TEST(t.dtype() == bn);
      for (const auto& [key, t] : net.bn1->named_buffers())
        if (mg::is_floating_point(t.dtype())) BOOST_TEST(t.dtype() == bn, key);
      // Master weights under O2 only, for the 16-bit parameters.
      BOOST_TEST(opt.master_weights() == (l == "O2"));
      BOOST_TEST(opt.master_weight(0).defined() == (l == "O2"));

      // A float32 batch goes in; the output is float32 where the model was
      // cast (apex casts every cast model's output, O3's too), and under O1
      // it is what autocast makes of the convolution: 16-bit.
      mg::autodiff::GradManager gm;
      gm.attach(net.parameters());
      const mg::Tensor x = batch();
      auto rec = gm.record();
      const mg::Tensor y = net(x);
      BOOST_TEST(y.dtype() == (l == "O1" ? DType::bfloat16 : DType::float32));
      BOOST_TEST(mg::amp::is_autocast_enabled() == (l == "O1"));
      const mg::Tensor loss = mg::F::mean(mg::F::astype(y, DType::float32));
      mg::amp::scale_loss(loss, opt, [&](const mg::Tensor& scaled) {
        BOOST_TEST(scaled.dtype() == DType::float32);
        gm.backward(scaled);
      });
      // Each parameter's gradient comes in its own dtype.
      for (const mg::Tensor& p : net.parameters()) BOOST_TEST(p.grad().dtype() == p.dtype());
      opt.step();
      BOOST_TEST(all_finite(net.parameters()));
    }
  }
  BOOST_TEST(!mg::amp::is_autocast_enabled());
}

BOOST_AUTO_TEST_CASE(a_cast_model_takes_float32_batches_and_integer_ids_pass_uncast) {
  // Cast by hand, a 16-bit model refuses a float32 batch ...
  mg::manual_seed(2);
  ConvNet by_hand;
  by_hand.to(DType::bfloat16, {.keep_batch_norm_fp32 = true});
  BOOST_CHECK_THROW(by_hand(batch()), mg::DTypeError);
  // ... which after initialize it takes, as apex's patched forward does.
  ConvNet net;
  mg::optim::SGD opt(net.parameters());
  mg::amp::Amp amp = mg::amp::initialize(net, opt, {.opt_level = "O2"});
  const mg::Tensor y = net(batch());
  BOOST_TEST(y.dtype() == DType::float32);
  BOOST_TEST((net.call_casts().input == std::optional(DType::bfloat16)));
  // forward() itself is not patched: it takes the model's dtype.
  BOOST_CHECK_THROW(net.forward(batch()), mg::DTypeError);
  BOOST_TEST(net.forward(batch().to(DType::bfloat16)).dtype() == DType::bfloat16);
}

BOOST_AUTO_TEST_CASE(integer_inputs_are_not_cast_and_outputs_follow_cast_model_outputs) {
  nn::Embedding emb(10, 4);
  mg::amp::Amp amp =
      mg::amp::initialize(emb, {.opt_level = "O3", .cast_model_outputs = DType::bfloat16});
  BOOST_TEST(emb.parameters()[0].dtype() == DType::bfloat16);
  const mg::Tensor ids = mg::tensor(std::vector<int64_t>{1, 2, 3}, {3});
  const mg::Tensor y = emb(ids);  // int64 ids pass as they are
  BOOST_TEST(y.dtype() == DType::bfloat16);
}

BOOST_AUTO_TEST_CASE(the_handle_ends_the_state_and_restores_autocast) {
  BOOST_TEST(!mg::amp::enabled.load());
  mg::manual_seed(3);
  ConvNet net;
  mg::optim::SGD opt(net.parameters());
  {
    mg::amp::Amp amp = mg::amp::initialize(net, opt, {.opt_level = "O1", .low_prec_dtype = DType::float16});
    BOOST_TEST(mg::amp::enabled.load());
    BOOST_TEST(mg::amp::autocast_dtype() == DType::float16);
    BOOST_TEST(amp.num_losses() == 1);
    BOOST_TEST(amp.loss_scale(0) == 65536.0);  // apex's 2^16
    // A second initialize while one lives is refused, and changes nothing.
    ConvNet other;
    mg::optim::SGD other_opt(other.parameters());
    const Values before = state_of(other);
    BOOST_CHECK_THROW((void)mg::amp::initialize(other, other_opt, {.opt_level = "O2"}), mg::StateError);
    BOOST_TEST((state_of(other) == before));
    BOOST_TEST(!other_opt.master_weights());
    BOOST_TEST(mg::amp::enabled.load());
    // A moved handle keeps the state alive.
    mg::amp::Amp moved = std::move(amp);
    BOOST_TEST(moved.num_losses() == 1);
    BOOST_CHECK_THROW(amp.num_losses(), mg::StateError);  // NOLINT(bugprone-use-after-move)
    BOOST_TEST(mg::amp::state_dict().size() == 2u);
  }
  BOOST_TEST(!mg::amp::enabled.load());
  BOOST_TEST(!mg::amp::low_prec_dtype.is_set());
  BOOST_CHECK_THROW(mg::amp::state_dict(), mg::StateError);
  BOOST_CHECK_THROW((void)mg::amp::scale_loss(mg::ones({}), opt), mg::StateError);
  // A new initialize may follow (the model is still float32 under O1).
  mg::amp::Amp again = mg::amp::initialize(net, opt, {.opt_level = "O0"});
  BOOST_TEST(!mg::amp::enabled.load());
}

BOOST_AUTO_TEST_CASE(refused_initialize_calls_change_nothing) {
  mg::manual_seed(4);
  ConvNet a, b;
  mg::optim::SGD opt_a(a.parameters()), opt_b(b.parameters());
  const Values before_a = state_of(a), before_b = state_of(b);
  const auto unchanged = [&] {
    BOOST_TEST((state_of(a) == before_a));
    BOOST_TEST((state_of(b) == before_b));
    BOOST_TEST(!opt_a.master_weights());
    BOOST_TEST(!opt_b.master_weights());
    BOOST_TEST((a.call_casts().input == std::nullopt));
    BOOST_TEST(!mg::amp::enabled.load());
    BOOST_CHECK_THROW(mg::amp::state_dict(), mg::StateError);  // no state was started
  };
  using Models = std::vector<std::reference_wrapper<nn::Module>>;
  using Opts = std::vector<std::reference_wrapper<mg::optim::Optimizer>>;
  BOOST_CHECK_THROW((void)mg::amp::initialize(Models{a, b}, Opts{opt_a, opt_b}, {.opt_level = "O5"}), mg::ValueError);
  unchanged();
  BOOST_CHECK_THROW((void)mg::amp::initialize(Models{a, b}, Opts{opt_a, opt_b}, {.opt_level = "O2", .num_losses = 0}),
                    mg::ValueError);
  unchanged();
  BOOST_CHECK_THROW((void)mg::amp::initialize(Models{a, a}, Opts{opt_a}, {.opt_level = "O2"}), mg::ValueError);
  unchanged();
  BOOST_CHECK_THROW((void)mg::amp::initialize(Models{a, b}, Opts{opt_a, opt_a}, {.opt_level = "O2"}), mg::ValueError);
  unchanged();
  BOOST_CHECK_THROW((void)mg::amp::initialize(Models{a, b}, Opts{opt_a}, {.opt_level = "O2", .loss_scale = 0.0}),
                    mg::ValueError);
  unchanged();
  BOOST_CHECK_THROW((void)mg::amp::initialize(Models{a, b}, Opts{opt_a}, {.opt_level = "O1", .master_weights = true}),
                    mg::ValueError);
  unchanged();
  // A model cast already (apex's check_params_fp32): the other model is not cast either.
  ConvNet half;
  half.to(DType::bfloat16);
  BOOST_CHECK_THROW((void)mg::amp::initialize(Models{a, half}, Opts{opt_a}, {.opt_level = "O2"}), mg::DTypeError);
  unchanged();
  // O2 on an optimizer that stepped: its master weights cannot start now.
  opt_b.step();  // no gradients: changes no value, but it is a step
  BOOST_CHECK_THROW((void)mg::amp::initialize(Models{a, b}, Opts{opt_a, opt_b}, {.opt_level = "O2"}), mg::StateError);
  unchanged();
  // While a GradManager records.
  mg::autodiff::GradManager gm;
  gm.attach(a.parameters());
  {
    auto rec = gm.record();
    BOOST_CHECK_THROW((void)mg::amp::initialize(a, opt_a, {.opt_level = "O2"}), mg::StateError);
  }
  unchanged();
  // The same calls, corrected, work.
  mg::amp::Amp amp = mg::amp::initialize(Models{a}, Opts{opt_a}, {.opt_level = "O2"});
  BOOST_TEST(opt_a.master_weights());
}

BOOST_AUTO_TEST_CASE(disabled_amp_changes_nothing_and_passes_the_loss_through) {
  mg::manual_seed(5);
  ConvNet net;
  mg::optim::SGD opt(net.parameters(), {.lr = 0.1});
  const Values before = state_of(net);
  mg::amp::Amp amp = mg::amp::initialize(net, opt, {.opt_level = "O2", .enabled = false});
  BOOST_TEST((state_of(net) == before));
  BOOST_TEST(!opt.master_weights());
  BOOST_TEST(!mg::amp::enabled.load());
  mg::autodiff::GradManager gm;
  gm.attach(net.parameters());
  auto rec = gm.record();
  const mg::Tensor loss = mg::F::mean(net(batch()));
  mg::amp::scale_loss(loss, opt, [&](const mg::Tensor& scaled) {
    BOOST_TEST(scaled.id() == loss.id());  // the loss itself
    gm.backward(scaled);
  });
  BOOST_TEST(mg::amp::state_dict().size() == 2u);
  mg::amp::load_state_dict(mg::amp::state_dict());  // the disabled scalers' state round-trips
  BOOST_TEST(amp.loss_scale(0) == 1.0);             // a disabled scaler's scale_factor()
}

BOOST_AUTO_TEST_SUITE_END()
