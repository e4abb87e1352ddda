// A gradient penalty under GradScaler: the scaled loss is differentiated with
// create_graph, the gradients are unscaled by hand for the penalty, and the
// penalised loss goes through the scaler's usual backward / step / update
// (the manual gear); or the scaler's own backward takes create_graph and
// unscales the tracked gradients itself (the automatic gear).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace F = mixgrad::F;

namespace {

// PyTorch's scaling test model: Linear(8, 8) -> Linear(8, 8), as tensors.
std::vector<mg::Tensor> make_params() {
  mg::manual_seed(42);
  return {mg::uniform({8, 8}, -0.35, 0.35), mg::uniform({8}, -0.35, 0.35), mg::uniform({8, 8}, -0.35, 0.35),
          mg::uniform({8}, -0.35, 0.35)};
}

mg::Tensor model(const std::vector<mg::Tensor>& p, const mg::Tensor& x) {
  return F::linear(F::linear(x, p[0], p[1]), p[2], p[3]);
}

// sqrt(sum ||g||^2) over the gradients, as recorded ops.
mg::Tensor grad_norm(const std::vector<mg::Tensor>& grads) {
  mg::Tensor total = mg::zeros({});
  for (const auto& g : grads) total = F::add(total, F::sum(F::pow(g, 2.0)));
  return F::sqrt(total);
}

// After the runs: the scaled parameters equal the control's, the scale ended
// at 128 grown twice and halved once (one skipped step), and the run trained
// (the control moved away from its start).
void check_matches_control(const std::vector<mg::Tensor>& scaled, const std::vector<mg::Tensor>& control,
                           const mg::amp::GradScaler& scaler) {
  BOOST_TEST(scaler.scale_factor() == 128.0 * 8.0 * 0.5);
  for (size_t k = 0; k < control.size(); ++k) {
    const auto a = scaled[k].to_vector<double>(), b = control[k].to_vector<double>();
    for (size_t j = 0; j < a.size(); ++j)
      BOOST_TEST(std::abs(a[j] - b[j]) <= 1e-5 * (1 + std::abs(b[j])), "parameter " << k << " element " << j << ": "
                                                                                     << a[j] << " vs " << b[j]);
  }
  const auto start = make_params()[0].to_vector<double>(), end = control[0].to_vector<double>();
  double moved = 0;
  for (size_t j = 0; j < start.size(); ++j) moved += std::abs(start[j] - end[j]);
  BOOST_TEST(moved > 1e-3);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(grad_penalty)

// PyTorch test_grad_scaling_penalty (test/test_cuda.py, run through
// _run_scaling_case): four batches, SGD(lr = 1), GradScaler(init_scale =
// 128, growth_interval = 1), an inf injected into the second layer's weight
// gradient at iteration 2. The scaled run must end with the same parameters
// as an unscaled control run that skips that step, and the scale at
// 128 * 2^3 (three clean steps) * 0.5 (one skipped).
BOOST_AUTO_TEST_CASE(scaled_gradient_penalty_matches_an_unscaled_control) {
  constexpr int kSkipIter = 2;
  mg::manual_seed(7);
  std::vector<std::pair<mg::Tensor, mg::Tensor>> data;
  for (int i = 0; i < 4; ++i) data.emplace_back(mg::normal({8, 8}), mg::normal({8, 8}));

  // Control: no scaling; the skipped iteration takes no step.
  std::vector<mg::Tensor> control = make_params();
  {
    mg::autodiff::GradManager gm;
    gm.attach(control);
    mg::optim::SGD opt(control, {.lr = 1.0});
    for (int i = 0; i < 4; ++i) {
      opt.clear_grad();
      auto rec = gm.record();
      mg::Tensor loss = F::mse_loss(model(control, data[i].first), data[i].second);
      gm.backward(loss, {}, {.create_graph = true});
      std::vector<mg::Tensor> grads;
      for (const auto& p : control) grads.push_back(p.grad());
      opt.clear_grad();
      gm.backward(F::add(loss, grad_norm(grads)));
      if (i != kSkipIter) opt.step();
    }
  }

  // Scaled: torch.autograd.grad(scaler.scale(loss), params, create_graph=True),
  // grads times 1 / scale, scaler.scale(loss + norm).backward(), step, update.
  std::vector<mg::Tensor> scaled = make_params();
  mg::amp::GradScaler scaler({.init_scale = 128.0, .growth_interval = 1});
  {
    mg::autodiff::GradManager gm;
    gm.attach(scaled);
    mg::optim::SGD opt(scaled, {.lr = 1.0});
    for (int i = 0; i < 4; ++i) {
      opt.clear_grad();
      auto rec = gm.record();
      mg::Tensor loss = F::mse_loss(model(scaled, data[i].first), data[i].second);
      const double scale = scaler.scale_factor();
      gm.backward(loss, mg::full({}, scale), {.create_graph = true});
      const double inv_scale = 1.0 / scale;
      std::vector<mg::Tensor> grads;
      for (const auto& p : scaled) grads.push_back(F::mul(p.grad(), inv_scale));
      opt.clear_grad();
      scaler.backward(gm, F::add(loss, grad_norm(grads)), mg::Tensor(),
          {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
      if (i == kSkipIter) scaled[2].grad().data<float>()[0] = std::numeric_limits<float>::infinity();
      scaler.step(opt);
      scaler.update();
    }
  }

  check_matches_control(scaled, control, scaler);
}

// The fp32 reference of one step: d(loss + ||dloss/dp||)/dp, no scaling.
std::vector<std::vector<double>> reference_grads(const std::vector<mg::Tensor>& start, const mg::Tensor& x,
                                                 const mg::Tensor& y) {
  std::vector<mg::Tensor> p;
  for (const auto& t : start) p.push_back(t.clone());
  mg::autodiff::GradManager gm;
  gm.attach(p);
  auto rec = gm.record();
  mg::Tensor loss = F::mse_loss(model(p, x), y);
  gm.backward(loss, {}, {.create_graph = true});
  std::vector<mg::Tensor> grads;
  for (const auto& t : p) grads.push_back(t.grad());
  for (const auto& t : p) t.set_grad(mg::Tensor());
  gm.backward(F::add(loss, grad_norm(grads)));
  std::vector<std::vector<double>> out;
  for (const auto& t : p) out.push_back(t.grad().to_vector<double>());
  return out;
}

// The automatic gear: scaler.backward(gm, loss, {}, {.create_graph = true})
// leaves unscaled, tracked gradients (no update: the step goes on), the
// penalised loss's scaler.backward unscales and updates. Same four batches,
// scaler and skipped iteration as above; the overflow comes from an inf
// upstream gradient of the first pass at iteration 2, so both passes see it.
BOOST_AUTO_TEST_CASE(automatic_gear_penalty_matches_the_fp32_reference) {
  constexpr int kSkipIter = 2;
  mg::manual_seed(7);
  std::vector<std::pair<mg::Tensor, mg::Tensor>> data;
  for (int i = 0; i < 4; ++i) data.emplace_back(mg::normal({8, 8}), mg::normal({8, 8}));

  std::vector<mg::Tensor> control = make_params();
  std::vector<mg::Tensor> scaled = make_params();
  mg::amp::GradScaler scaler({.init_scale = 128.0, .growth_interval = 1});
  mg::autodiff::GradManager gm;
  gm.attach(scaled);
  mg::optim::SGD opt(scaled, {.lr = 1.0});
  mg::optim::SGD control_opt(control, {.lr = 1.0});
  for (int i = 0; i < 4; ++i) {
    const auto& [x, y] = data[i];
    const auto expected = reference_grads(control, x, y);
    const double scale_before = scaler.scale_factor();
    opt.clear_grad();
    {
      auto rec = gm.record();
      mg::Tensor loss = F::mse_loss(model(scaled, x), y);
      const mg::Tensor dy = i == kSkipIter ? mg::full({}, std::numeric_limits<double>::infinity()) : mg::Tensor();
      scaler.backward(gm, loss, dy, {.create_graph = true});
      BOOST_TEST(gm.is_recording());
      BOOST_TEST(scaler.scale_factor() == scale_before);  // not updated by the first pass
      std::vector<mg::Tensor> grads;
      for (const auto& p : scaled) grads.push_back(p.grad());
      if (i != kSkipIter) {  // unscaled: the fp32 gradient of the loss alone
        std::vector<mg::Tensor> ref;
        for (const auto& t : control) ref.push_back(t.clone());
        mg::autodiff::GradManager gm2;
        gm2.attach(ref);
        auto rec2 = gm2.record();
        gm2.backward(F::mse_loss(model(ref, x), y));
        for (size_t k = 0; k < ref.size(); ++k) {
          const auto a = grads[k].to_vector<double>(), b = ref[k].grad().to_vector<double>();
          for (size_t j = 0; j < a.size(); ++j) BOOST_TEST(std::abs(a[j] - b[j]) <= 1e-5 * (1 + std::abs(b[j])));
        }
      }
      opt.clear_grad();
      scaler.backward(gm, F::add(loss, grad_norm(grads)));
    }
    if (i != kSkipIter) {
      for (size_t k = 0; k < scaled.size(); ++k) {
        const auto a = scaled[k].grad().to_vector<double>();
        for (size_t j = 0; j < a.size(); ++j)
          BOOST_TEST(std::abs(a[j] - expected[k][j]) <= 1e-5 * (1 + std::abs(expected[k][j])),
                     "iteration " << i << " parameter " << k << " element " << j << ": " << a[j] << " vs "
                                  << expected[k][j]);
      }
      BOOST_TEST(!scaler.found_non_finite());
      for (size_t k = 0; k < control.size(); ++k)
        control[k].set_grad(mg::tensor(expected[k], control[k].shape(), control[k].dtype()));
      control_opt.step().clear_grad();
    } else {
      BOOST_TEST(scaler.found_non_finite());
    }
    opt.step();  // skipped at kSkipIter: the gradients carry the step's flag
  }
  check_matches_control(scaled, control, scaler);
}

// The two passes of a step share its found-inf flag: an overflow of the
// create_graph pass alone (a clean second pass) still skips the step.
BOOST_AUTO_TEST_CASE(an_overflow_of_the_first_pass_alone_skips_the_step) {
  std::vector<mg::Tensor> p = make_params();
  const auto before = p[0].to_vector<double>();
  mg::amp::GradScaler scaler({.init_scale = 128.0, .growth_interval = 1});
  mg::autodiff::GradManager gm;
  gm.attach(p);
  mg::optim::SGD opt(p, {.lr = 1.0});
  mg::manual_seed(3);
  const mg::Tensor x = mg::normal({8, 8}), y = mg::normal({8, 8});
  {
    auto rec = gm.record();
    mg::Tensor loss = F::mse_loss(model(p, x), y);
    scaler.backward(gm, loss, mg::full({}, std::numeric_limits<double>::infinity()), {.create_graph = true});
    opt.clear_grad();
    scaler.backward(gm, loss);  // clean: the usual scaled dy
  }
  BOOST_TEST(std::isfinite(p[0].grad().to_vector<double>()[0]));
  BOOST_TEST(scaler.found_non_finite());
  BOOST_TEST(scaler.scale_factor() == 64.0);  // one backoff
  opt.step();
  BOOST_TEST(p[0].to_vector<double>() == before, boost::test_tools::per_element());
}

// The recorded unscale keeps the factor of its own pass: with `always`, the
// create_graph pass updates the scale (4 -> 8) before the penalty's
// backward, which must still differentiate through 1/4. float64, whose
// product takes the factor without a cast. loss = sum(x * w^3): the
// gradient g = 3 x w^2, the penalty sum(g^2), its gradient 36 x^2 w^3.
BOOST_AUTO_TEST_CASE(the_recorded_unscale_keeps_its_pass_scale_when_the_scale_updates_between_passes) {
  const std::vector<double> wv = {0.5, -1.25, 2.0}, xv = {1.5, 0.75, -2.0};
  mg::Tensor w = mg::tensor(wv, {3}, mg::DType::float64);
  const mg::Tensor x = mg::tensor(xv, {3}, mg::DType::float64);
  mg::amp::GradScaler scaler({.init_scale = 4.0, .growth_interval = 1});
  mg::autodiff::GradManager gm;
  gm.attach(w);
  {
    auto rec = gm.record();
    const mg::Tensor loss = F::sum(F::mul(x, F::pow(w, 3.0)));
    scaler.backward(gm, loss, mg::Tensor(),
                    {.update_scale = mg::amp::UpdateScale::always, .create_graph = true});
    BOOST_TEST(scaler.scale_factor() == 8.0);
    const mg::Tensor penalty = F::sum(F::pow(w.grad(), 2.0));
    w.set_grad(mg::Tensor());
    scaler.backward(gm, penalty);
  }
  const std::vector<double> got = w.grad().to_vector<double>();
  for (size_t i = 0; i < wv.size(); ++i)
    BOOST_TEST(got[i] == 36.0 * xv[i] * xv[i] * wv[i] * wv[i] * wv[i], boost::test_tools::tolerance(1e-12));
}

// A create_graph backward whose gradients are not cleared must not be summed
// with the next pass's scaled ones: refused as for any unscaled gradient.
BOOST_AUTO_TEST_CASE(uncleared_create_graph_gradients_are_refused) {
  std::vector<mg::Tensor> p = make_params();
  mg::amp::GradScaler scaler;
  mg::autodiff::GradManager gm;
  gm.attach(p);
  const mg::Tensor x = mg::ones({8, 8}), y = mg::zeros({8, 8});
  auto rec = gm.record();
  mg::Tensor loss = F::mse_loss(model(p, x), y);
  scaler.backward(gm, loss, {}, {.create_graph = true});
  const auto g = p[0].grad().to_vector<double>();
  BOOST_CHECK_THROW(scaler.backward(gm, F::add(loss, grad_norm({p[0].grad()}))), mg::StateError);
  BOOST_TEST(p[0].grad().to_vector<double>() == g, boost::test_tools::per_element());
}

// A disabled scaler passes create_graph on: the penalty differentiates
// through gradients it never touched.
BOOST_AUTO_TEST_CASE(a_disabled_scaler_passes_create_graph_through) {
  std::vector<mg::Tensor> p = make_params();
  mg::manual_seed(5);
  const mg::Tensor x = mg::normal({8, 8}), y = mg::normal({8, 8});
  const auto expected = reference_grads(p, x, y);
  mg::amp::GradScaler scaler({.enabled = false});
  mg::autodiff::GradManager gm;
  gm.attach(p);
  {
    auto rec = gm.record();
    mg::Tensor loss = F::mse_loss(model(p, x), y);
    scaler.backward(gm, loss, {}, {.create_graph = true});
    std::vector<mg::Tensor> grads;
    for (const auto& t : p) grads.push_back(t.grad());
    for (const auto& t : p) t.set_grad(mg::Tensor());
    scaler.backward(gm, F::add(loss, grad_norm(grads)));
  }
  for (size_t k = 0; k < p.size(); ++k) {
    const auto a = p[k].grad().to_vector<double>();
    for (size_t j = 0; j < a.size(); ++j)
      BOOST_TEST(std::abs(a[j] - expected[k][j]) <= 1e-6 * (1 + std::abs(expected[k][j])));
  }
}

BOOST_AUTO_TEST_SUITE_END()
