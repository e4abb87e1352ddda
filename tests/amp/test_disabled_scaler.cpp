// GradScaler({.enabled = false}): every method passes through, so one
// training loop serves float32 and mixed precision.
#include <boost/test/unit_test.hpp>

#include <unistd.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <limits>

#include "amp_test_util.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
using amptest::CountingOptimizer;
using amptest::from_map;
using amptest::param_with_grad;
using amptest::to_map;
using amptest::same_state;
using mg::DType;

namespace {

mg::amp::GradScaler disabled() { return mg::amp::GradScaler({.enabled = false}); }

// A few SGD-with-momentum steps of a small MLP in float32; with a scaler when
// one is given. Returns the parameters' bytes.
std::vector<std::vector<float>> train(mg::amp::GradScaler* scaler) {
  mg::manual_seed(3);
  auto x = mg::normal({32, 8});
  auto labels = mg::F::argmax(mg::F::matmul(x, mg::normal({8, 3})), 1);
  auto net = mg::nn::Sequential(mg::nn::Linear(8, 16), mg::nn::ReLU(), mg::nn::Linear(16, 3));
  mg::autodiff::GradManager gm;
  gm.attach(net.parameters());
  mg::optim::SGD opt(net.parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 5; ++step) {
    auto rec = gm.record();
    auto loss = mg::F::cross_entropy(net(x), labels);
    if (scaler) {
      scaler->backward(gm, loss);
      scaler->step(opt);
      opt.clear_grad();
    } else {
      gm.backward(loss);
      opt.step().clear_grad();
    }
  }
  std::vector<std::vector<float>> out;
  for (const auto& p : net.parameters()) out.push_back(p.to_vector<float>());
  return out;
}

}  // namespace

// Upstream: PyTorch test_cuda.py / test_torch.py _run_scaling_case's enabled=False pass.
BOOST_AUTO_TEST_CASE(float32_loop_with_disabled_scaler_is_bit_identical_to_no_scaler) {
  const auto plain = train(nullptr);
  auto scaler = disabled();
  const auto through = train(&scaler);
  BOOST_TEST_REQUIRE(plain.size() == through.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    BOOST_TEST_REQUIRE(plain[i].size() == through[i].size());
    for (size_t j = 0; j < plain[i].size(); ++j)
      BOOST_TEST(std::bit_cast<uint32_t>(plain[i][j]) == std::bit_cast<uint32_t>(through[i][j]));
  }
  // The same loop with an enabled scaler is a different computation (scaled,
  // float32 rounding of the unscale): a check that the comparison can fail.
  mg::amp::GradScaler enabled({.init_scale = 3.0});
  const auto scaled = train(&enabled);
  bool any_diff = false;
  for (size_t i = 0; i < plain.size(); ++i)
    for (size_t j = 0; j < plain[i].size(); ++j) any_diff |= plain[i][j] != scaled[i][j];
  BOOST_TEST(any_diff);
}

BOOST_AUTO_TEST_CASE(disabled_scaler_reports_pass_through_values) {
  auto s = disabled();
  BOOST_TEST(!s.is_enabled());
  BOOST_TEST(s.scale_factor() == 1.0);
  BOOST_TEST(!s.found_non_finite());
  BOOST_TEST(mg::amp::GradScaler().is_enabled());
  BOOST_TEST(mg::amp::GradScaler().scale_factor() == 16.0);
}

BOOST_AUTO_TEST_CASE(disabled_backward_is_plain_backward) {
  mg::autodiff::GradManager gm;
  auto w = mg::tensor({1.f, 2.f}, {2});
  gm.attach(w);
  auto s = disabled();
  {
    auto rec = gm.record();
    s.backward(gm, mg::F::mul(w, 3.0));  // dy = ones, not ones * scale
  }
  BOOST_TEST(w.grad().to_vector<float>() == std::vector<float>({3, 3}), boost::test_tools::per_element());
  {
    auto rec = gm.record();
    s.backward(gm, mg::F::mul(w, 3.0), mg::tensor({1.f, 10.f}, {2}));  // accumulates, as gm.backward does
  }
  BOOST_TEST(w.grad().to_vector<float>() == std::vector<float>({6, 33}), boost::test_tools::per_element());
  BOOST_TEST(!gm.is_recording());
}

BOOST_AUTO_TEST_CASE(disabled_unscale_and_update_do_nothing) {
  const double inf = std::numeric_limits<double>::infinity();
  auto s = disabled();
  const auto before = s.state_dict();
  auto p = param_with_grad({inf, 2.0}, DType::float32);
  const mg::Tensor g = p.grad();
  BOOST_TEST(&s.unscale({p}) == &s);
  BOOST_TEST(&s.unscale({p}) == &s);  // a second unscale of the same tensor: no StateError
  BOOST_TEST(!s.found_non_finite());   // no inf check
  BOOST_TEST_REQUIRE(p.grad().defined());  // not cleared
  BOOST_TEST(p.grad().id() == g.id());
  BOOST_TEST(std::isinf(p.grad().to_vector<float>()[0]));
  BOOST_TEST(p.grad().to_vector<float>()[1] == 2.f);  // not divided
  auto ints = mg::arange(3);
  BOOST_CHECK_NO_THROW(s.unscale({ints}));  // not even its arguments are checked
  s.update();
  s.update(1e300);  // out of range, but ignored
  BOOST_TEST(same_state(s.state_dict(), before));
  BOOST_TEST(s.scale_factor() == 1.0);
  BOOST_TEST(s.growth_tracker() == 0);
}

BOOST_AUTO_TEST_CASE(disabled_step_always_steps) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto s = disabled();
  CountingOptimizer opt;
  auto p = param_with_grad({nan}, DType::float32);
  s.unscale({p});
  s.step(opt);
  s.update();
  s.step(opt);
  BOOST_TEST(opt.steps == 2);
  mg::optim::SGD sgd({p}, {.lr = 1.0});
  s.step(sgd);  // a NaN gradient, but no flag: stepped
  BOOST_TEST(sgd.step_count(0) == 1);
  BOOST_TEST(std::isnan(p.to_vector<float>()[0]));
}

BOOST_AUTO_TEST_CASE(disabled_state_dict_records_enabled_false_and_loads) {
  mg::amp::GradScaler off({.init_scale = 256.0, .growth_interval = 10, .enabled = false});
  const auto state = off.state_dict();
  BOOST_TEST_REQUIRE(state.contains("enabled"));
  BOOST_TEST(state.at("enabled").dtype() == DType::bool_);
  BOOST_TEST(state.at("enabled").item<double>() == 0.0);
  BOOST_TEST(state.at("scale_factor").item<double>() == 256.0);  // the internal scale, not scale_factor()
  BOOST_TEST(!mg::amp::GradScaler().state_dict().contains("enabled"));  // MegEngine's keys unchanged

  // Into a disabled scaler: the round trip is exact, and it stays a pass-through.
  auto other = disabled();
  other.load_state_dict(state);
  BOOST_TEST(same_state(other.state_dict(), state));
  BOOST_TEST(!other.is_enabled());
  BOOST_TEST(other.scale_factor() == 1.0);

  // Into an enabled one: the scaler stays enabled and resumes from 256.
  mg::amp::GradScaler on;
  on.load_state_dict(state);
  BOOST_TEST(on.is_enabled());
  BOOST_TEST(on.scale_factor() == 256.0);
  BOOST_TEST(on.options().growth_interval == 10);
  BOOST_TEST(!on.state_dict().contains("enabled"));

  // An enabled scaler's dict into a disabled one: loaded, still disabled.
  auto off2 = disabled();
  off2.load_state_dict(mg::amp::GradScaler(64.0).state_dict());
  BOOST_TEST(!off2.is_enabled());
  BOOST_TEST(off2.scale_factor() == 1.0);
  BOOST_TEST(off2.state_dict().at("scale_factor").item<double>() == 64.0);
}

BOOST_AUTO_TEST_CASE(bad_enabled_entry_throws_and_loads_nothing) {
  mg::amp::GradScaler s;
  const auto before = s.state_dict();
  auto bad = to_map(disabled().state_dict());
  bad["enabled"] = 0.5;
  bad["scale_factor"] = 1024.0;
  try {
    s.load_state_dict(from_map(bad));
    BOOST_FAIL("expected ValueError");
  } catch (const mg::ValueError& e) {
    BOOST_TEST(std::string(e.what()).find("enabled") != std::string::npos);
    BOOST_TEST(std::string(e.what()).find("0.5") != std::string::npos);
  }
  BOOST_TEST(same_state(s.state_dict(), before));
}

BOOST_AUTO_TEST_CASE(disabled_options_are_still_validated) {
  BOOST_CHECK_THROW(mg::amp::GradScaler({.growth_factor = 0.5, .enabled = false}), mg::ValueError);
}

BOOST_AUTO_TEST_CASE(checkpoint_of_a_disabled_scaler_round_trips) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("mixgrad_disabled_scaler_" + std::to_string(::getpid()) + ".safetensors");
  mg::amp::GradScaler off({.init_scale = 512.0, .enabled = false});
  mg::io::save_checkpoint(path, {.scaler = &off, .rng = false, .autocast = false});
  auto loaded_off = disabled();
  mg::io::load_checkpoint(path, {.scaler = &loaded_off, .rng = false, .autocast = false});
  BOOST_TEST(same_state(loaded_off.state_dict(), off.state_dict()));
  BOOST_TEST(!loaded_off.is_enabled());
  mg::amp::GradScaler loaded_on;  // resuming a float32 run with AMP switched on
  mg::io::load_checkpoint(path, {.scaler = &loaded_on, .rng = false, .autocast = false});
  BOOST_TEST(loaded_on.is_enabled());
  BOOST_TEST(loaded_on.scale_factor() == 512.0);
  std::filesystem::remove(path);
}
