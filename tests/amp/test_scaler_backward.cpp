// GradScaler's automatic gear, backward(gm, y, dy, unscale_grad,
// update_scale), and its equivalence with the manual gear.
//
// The tiny differentiable problem: y = sum_to(broadcast_to(astype(w, low), [4, 2, 3]), [1, 2, 3]),
// so dL/dw = 4 * dy, computed by the tape through three recorded ops and a
// low-precision round trip.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>

#include "amp_test_util.hpp"

namespace mg = mixgrad;
using amptest::same_state;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

mg::Tensor forward(const mg::Tensor& w, mg::DType low = mg::DType::bfloat16) {
  return mg::F::sum_to(mg::F::broadcast_to(mg::F::astype(w, low), {4, 2, 3}), {1, 2, 3});
}

mg::Tensor make_weight() { return mg::tensor({0.5f, -1.f, 2.f, 0.25f, 3.f, -0.75f}, {2, 3}); }

std::vector<float> times(const std::vector<double>& v, double k) {
  std::vector<float> out;
  for (double x : v) out.push_back(static_cast<float>(x * k));
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(scaler_backward)

// Upstream: MegEngine test_grad_scaler.py test_grad_scaler (ported in test_upstream_scaler.cpp).
BOOST_AUTO_TEST_CASE(default_dy_is_the_scale_and_grads_come_back_unscaled) {
  mg::Tensor w = make_weight();
  mg::autodiff::GradManager gm;
  gm.attach(w);
  mg::amp::GradScaler scaler({.init_scale = 256.0, .growth_interval = 3});
  {
    auto rec = gm.record();
    scaler.backward(gm, forward(w));
  }
  BOOST_TEST(w.grad().dtype() == mg::DType::float32);
  BOOST_TEST(w.grad().to_vector<float>() == std::vector<float>(6, 4.f), boost::test_tools::per_element());
  BOOST_TEST(!scaler.found_non_finite());
  BOOST_TEST(scaler.growth_tracker() == 1);  // updated, as unscale_grad was true
}

BOOST_AUTO_TEST_CASE(given_dy_is_multiplied_by_the_scale) {
  mg::Tensor w = make_weight();
  mg::autodiff::GradManager gm;
  gm.attach(w);
  mg::amp::GradScaler scaler({.init_scale = 16.0});
  const std::vector<double> dy = {1, -2, 3, 0.5, -0.25, 8};
  {
    auto rec = gm.record();
    scaler.backward(gm, forward(w), mg::tensor(dy, {1, 2, 3}, mg::DType::float32), {.unscale_grad = false});
  }
  BOOST_TEST(w.grad().to_vector<float>() == times(dy, 4.0 * 16.0), boost::test_tools::per_element());
  BOOST_TEST(scaler.growth_tracker() == 0);  // no unscale, so no update by default
}

// Upstream: the MegEngine-gear form of PyTorch test_grad_scaling_accumulation (ported in test_upstream_scaler.cpp).
BOOST_AUTO_TEST_CASE(accumulating_micro_batches_then_unscaling) {
  mg::Tensor w = make_weight();
  mg::autodiff::GradManager gm;
  gm.attach(w);
  mg::amp::GradScaler scaler({.init_scale = 32.0});
  for (int i = 0; i < 2; ++i) {
    auto rec = gm.record();
    scaler.backward(gm, forward(w), mg::Tensor(), {.unscale_grad = false});
  }
  {
    auto rec = gm.record();
    scaler.backward(gm, forward(w));  // the last micro-batch unscales and updates
  }
  BOOST_TEST(w.grad().to_vector<float>() == std::vector<float>(6, 12.f), boost::test_tools::per_element());
  BOOST_TEST(scaler.growth_tracker() == 1);
}

BOOST_AUTO_TEST_CASE(update_scale_choices) {
  mg::Tensor w = make_weight();
  mg::autodiff::GradManager gm;
  gm.attach(w);
  mg::amp::GradScaler scaler({.init_scale = 8.0});
  {
    auto rec = gm.record();
    scaler.backward(gm, forward(w), mg::Tensor(),
        {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::always});
  }
  BOOST_TEST(w.grad().to_vector<float>() == std::vector<float>(6, 32.f), boost::test_tools::per_element());
  BOOST_TEST(scaler.growth_tracker() == 1);
  w.set_grad(mg::Tensor());
  {
    auto rec = gm.record();
    scaler.backward(gm, forward(w), mg::Tensor(), {.unscale_grad = true, .update_scale = mg::amp::UpdateScale::never});
  }
  BOOST_TEST(w.grad().to_vector<float>() == std::vector<float>(6, 4.f), boost::test_tools::per_element());
  BOOST_TEST(scaler.growth_tracker() == 1);

  // The step is still open (no update): another backward would add scaled
  // grads to unscaled ones, so it is refused before anything runs.
  auto rec = gm.record();
  mg::Tensor y = forward(w);
  const auto before = scaler.state_dict();
  BOOST_CHECK_THROW(scaler.backward(gm, y), mg::StateError);
  BOOST_TEST(gm.is_recording());
  BOOST_TEST(w.grad().to_vector<float>() == std::vector<float>(6, 4.f), boost::test_tools::per_element());
  BOOST_TEST(same_state(scaler.state_dict(), before));
  scaler.update();
  w.set_grad(mg::Tensor());
  scaler.backward(gm, y);
  BOOST_TEST(w.grad().to_vector<float>() == std::vector<float>(6, 4.f), boost::test_tools::per_element());
}

// PyTorch's loop: backward without unscaling, scaler.step(opt), update. The
// gradients scaler.backward scaled are marked: opt.step() refuses them, and
// scaler.step(opt) unscales them (once) before stepping.
// Upstream: PyTorch test_cuda.py / test_torch.py test_grad_scaling_autocast's loop (scale, backward, step, update).
BOOST_AUTO_TEST_CASE(scaled_gradients_are_unscaled_by_step_and_refused_by_opt_step) {
  mg::Tensor w = make_weight();
  const std::vector<float> w0 = w.to_vector<float>();
  mg::autodiff::GradManager gm;
  gm.attach(w);
  mg::amp::GradScaler scaler({.init_scale = 8.0, .growth_interval = 1});
  mg::optim::SGD opt({w}, {.lr = 0.5});
  {
    auto rec = gm.record();
    scaler.backward(gm, forward(w), mg::Tensor(), {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
  }
  BOOST_TEST(w.grad().to_vector<float>() == std::vector<float>(6, 32.f), boost::test_tools::per_element());
  BOOST_CHECK_THROW(opt.step(), mg::StateError);  // still scaled
  BOOST_TEST(w.to_vector<float>() == w0, boost::test_tools::per_element());
  BOOST_TEST(w.grad().to_vector<float>() == std::vector<float>(6, 32.f), boost::test_tools::per_element());
  scaler.step(opt);  // unscales, then steps
  BOOST_TEST(w.grad().to_vector<float>() == std::vector<float>(6, 4.f), boost::test_tools::per_element());
  std::vector<float> want = w0;
  for (float& x : want) x -= 0.5f * 4.f;
  BOOST_TEST(w.to_vector<float>() == want, boost::test_tools::per_element());
  scaler.step(opt);  // already unscaled: not divided again
  BOOST_TEST(w.grad().to_vector<float>() == std::vector<float>(6, 4.f), boost::test_tools::per_element());
  scaler.update();
  BOOST_TEST(scaler.scale_factor() == 16.0);
  BOOST_TEST(opt.step_count(0) == 2);
  opt.clear_grad();

  // An overflowed step of this loop is skipped and backs off.
  {
    auto rec = gm.record();
    scaler.backward(gm, forward(w), mg::full({1, 2, 3}, kInf),
        {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
  }
  const std::vector<float> w1 = w.to_vector<float>();
  scaler.step(opt);
  scaler.update();
  BOOST_TEST(w.to_vector<float>() == w1, boost::test_tools::per_element());
  BOOST_TEST(opt.step_count(0) == 2);
  BOOST_TEST(scaler.scale_factor() == 8.0);
  opt.clear_grad();

  // Another scaler does not unscale this one's gradients: the step refuses them.
  {
    auto rec = gm.record();
    scaler.backward(gm, forward(w), mg::Tensor(), {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
  }
  mg::amp::GradScaler other;
  BOOST_CHECK_THROW(other.step(opt), mg::StateError);
  BOOST_TEST(w.grad().to_vector<float>() == std::vector<float>(6, 32.f), boost::test_tools::per_element());
  BOOST_TEST(w.to_vector<float>() == w1, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(several_outputs) {
  mg::Tensor w = make_weight();
  mg::autodiff::GradManager gm;
  gm.attach(w);
  mg::amp::GradScaler scaler({.init_scale = 64.0});
  {
    auto rec = gm.record();
    scaler.backward(gm, std::vector<mg::Tensor>{forward(w), mg::F::reshape(w, {6})});
  }
  BOOST_TEST(w.grad().to_vector<float>() == std::vector<float>(6, 5.f), boost::test_tools::per_element());
  w.set_grad(mg::Tensor());
  {
    auto rec = gm.record();
    mg::Tensor y1 = forward(w), y2 = mg::F::reshape(w, {6});
    scaler.backward(gm, {y1, y2}, {mg::Tensor(), mg::full({6}, 2.0)});
  }
  BOOST_TEST(w.grad().to_vector<float>() == std::vector<float>(6, 6.f), boost::test_tools::per_element());
  {
    auto rec = gm.record();
    mg::Tensor y1 = forward(w);
    BOOST_CHECK_THROW(scaler.backward(gm, {y1}, {mg::Tensor(), mg::Tensor()}), mg::ShapeError);
  }
}

BOOST_AUTO_TEST_CASE(grad_manager_errors_leave_the_scaler_unchanged) {
  mg::Tensor w = make_weight();
  mg::autodiff::GradManager gm;
  gm.attach(w);
  mg::amp::GradScaler scaler;
  mg::Tensor y = forward(w);  // not recording
  const auto before = scaler.state_dict();
  BOOST_CHECK_THROW(scaler.backward(gm, y), mg::StateError);
  BOOST_TEST(same_state(scaler.state_dict(), before));
  BOOST_TEST(!scaler.found_non_finite());
  BOOST_TEST(!w.grad().defined());
}

BOOST_AUTO_TEST_CASE(a_scale_too_large_for_float16_backs_off) {
  mg::Tensor w = make_weight();
  mg::autodiff::GradManager gm;
  gm.attach(w);
  // 2^17 and 2^16 are inf as a float16 dy; 2^15 and 2^14 overflow in the
  // four-way sum; 2^13 fits (4 * 2^13 = 2^15 <= 65504).
  mg::amp::GradScaler scaler({.init_scale = 131072.0});
  mg::optim::SGD opt({w}, {.lr = 1.0});
  const std::vector<float> w0 = w.to_vector<float>();
  std::vector<double> scales;
  for (int i = 0; i < 6; ++i) {
    {
      auto rec = gm.record();
      scaler.backward(gm, forward(w, mg::DType::float16));
    }
    scales.push_back(scaler.scale_factor());
    if (!scaler.found_non_finite()) break;
    opt.step().clear_grad();  // skipped on the device: w unchanged
    BOOST_TEST(w.to_vector<float>() == w0, boost::test_tools::per_element());
    BOOST_TEST(opt.step_count(0) == 0);
  }
  BOOST_TEST(scales == std::vector<double>({65536.0, 32768.0, 16384.0, 8192.0, 8192.0}),
             boost::test_tools::per_element());
  BOOST_TEST(w.grad().to_vector<float>() == std::vector<float>(6, 4.f), boost::test_tools::per_element());
}

// Same problem, same dys (one with an inf), one step each: the automatic
// and the manual gear agree on every gradient and on the scale throughout.
BOOST_AUTO_TEST_CASE(automatic_and_manual_gears_agree) {
  mg::Tensor wa = make_weight(), wb = make_weight();
  mg::autodiff::GradManager gma, gmb;
  gma.attach(wa);
  gmb.attach(wb);
  const mg::amp::GradScalerOptions options{.init_scale = 16.0, .growth_interval = 2};
  mg::amp::GradScaler auto_gear(options), manual_gear(options);
  const std::vector<std::vector<double>> dys = {
      {1, 2, 3, 4, 5, 6}, {0.5, 0.5, 1, -1, 2, -2}, {1, kInf, 1, 1, 1, 1}, {3, 1, 4, 1, 5, 9}, {-1, -2, -3, 0, 1, 2},
      {0.25, 0.125, 8, 16, -4, 2}};
  for (size_t step = 0; step < dys.size(); ++step) {
    {
      auto rec = gma.record();
      auto_gear.backward(gma, forward(wa), mg::tensor(dys[step], {1, 2, 3}, mg::DType::float32));
    }
    {
      auto rec = gmb.record();
      const double scale = manual_gear.scale_factor();
      gmb.backward(forward(wb), mg::tensor(times(dys[step], scale), {1, 2, 3}));
    }
    manual_gear.unscale(gmb.attached_tensors());
    manual_gear.update();

    BOOST_TEST(auto_gear.scale_factor() == manual_gear.scale_factor());
    BOOST_TEST(auto_gear.growth_tracker() == manual_gear.growth_tracker());
    BOOST_TEST(auto_gear.found_non_finite() == manual_gear.found_non_finite());
    BOOST_TEST(auto_gear.found_non_finite() == (step == 2));
    if (!auto_gear.found_non_finite()) {
      BOOST_TEST(wa.grad().to_vector<float>() == wb.grad().to_vector<float>(), boost::test_tools::per_element());
      BOOST_TEST(wa.grad().to_vector<float>() == times(dys[step], 4.0), boost::test_tools::per_element());
    }
    wa.set_grad(mg::Tensor());  // opt.step().clear_grad()
    wb.set_grad(mg::Tensor());
  }
  // 16 -> 32 (2 clean) -> overflow 16 -> 32 after 2 more clean -> 1 clean
  BOOST_TEST(auto_gear.scale_factor() == 32.0);
  BOOST_TEST(auto_gear.growth_tracker() == 1);
}

// The documented training step: autocast, a loss, scaler.backward(gm, loss)
// versus gm.backward(loss, full_like(loss, scale)) + unscale + update. The
// loss is cast to float16 and the scale starts above float16's range (the
// scale's own limit, 2^126, fits a float32 dy), so the first steps overflow
// and back off; growth every 2 clean steps then overflows again. Whenever a
// step is clean, the grads equal those of an unscaled backward exactly
// (powers of two commute with every rounding on the way).
BOOST_AUTO_TEST_CASE(documented_workflow_with_a_loss_under_autocast) {
  auto weight = [] { return mg::tensor({0.5f, -1.f, 2.f, 0.25f, 3.f, -0.75f}, {2, 3}); };
  mg::Tensor wa = weight(), wb = weight(), wref = weight();
  mg::autodiff::GradManager gma, gmb, gmref;
  gma.attach(wa);
  gmb.attach(wb);
  gmref.attach(wref);
  const mg::Tensor labels = mg::tensor(std::vector<int64_t>{2, 0}, {2});
  auto loss_of = [&](const mg::Tensor& w) {
    mg::amp::autocast scope(true, mg::DType::bfloat16);
    return mg::F::astype(mg::F::cross_entropy(mg::F::astype(w, mg::DType::bfloat16), labels), mg::DType::float16);
  };
  {
    auto rec = gmref.record();
    gmref.backward(loss_of(wref));
  }
  const std::vector<float> reference = wref.grad().to_vector<float>();

  const mg::amp::GradScalerOptions options{.init_scale = 0x1p18, .growth_interval = 2};
  mg::amp::GradScaler auto_gear(options), manual_gear(options);
  std::vector<bool> overflowed;
  for (int step = 0; step < 8; ++step) {
    {
      auto rec = gma.record();
      auto_gear.backward(gma, loss_of(wa));
    }
    {
      auto rec = gmb.record();
      mg::Tensor loss = loss_of(wb);
      gmb.backward(loss, mg::full_like(loss, manual_gear.scale_factor()));
    }
    manual_gear.unscale(gmb.attached_tensors());
    manual_gear.update();

    BOOST_TEST(auto_gear.scale_factor() == manual_gear.scale_factor());
    BOOST_TEST(auto_gear.found_non_finite() == manual_gear.found_non_finite());
    overflowed.push_back(auto_gear.found_non_finite());
    if (!auto_gear.found_non_finite()) {
      BOOST_TEST(wa.grad().to_vector<float>() == reference, boost::test_tools::per_element());
      BOOST_TEST(wb.grad().to_vector<float>() == reference, boost::test_tools::per_element());
    }
    wa.set_grad(mg::Tensor());
    wb.set_grad(mg::Tensor());
  }
  // 2^18, 2^17, 2^16 are inf as a float16 dy (its largest finite value is
  // 65504); 2^15 is clean twice, then grows to 2^16 and overflows again.
  BOOST_TEST(overflowed == std::vector<bool>({true, true, true, false, false, true, false, false}),
             boost::test_tools::per_element());
  BOOST_TEST(auto_gear.scale_factor() == 0x1p16);  // grown again after two clean steps
}

BOOST_AUTO_TEST_SUITE_END()
