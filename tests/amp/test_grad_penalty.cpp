// A gradient penalty under GradScaler: the scaled loss is differentiated with
// create_graph, the gradients are unscaled by hand for the penalty, and the
// penalised loss goes through the scaler's usual backward / step / update.
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
      scaler.backward(gm, F::add(loss, grad_norm(grads)), mg::Tensor(), /*unscale_grad=*/false,
                      mg::amp::UpdateScale::never);
      if (i == kSkipIter) scaled[2].grad().data<float>()[0] = std::numeric_limits<float>::infinity();
      scaler.step(opt);
      scaler.update();
    }
  }

  BOOST_TEST(scaler.scale_factor() == 128.0 * 8.0 * 0.5);
  for (size_t k = 0; k < control.size(); ++k) {
    const auto a = scaled[k].to_vector<double>(), b = control[k].to_vector<double>();
    for (size_t j = 0; j < a.size(); ++j)
      BOOST_TEST(std::abs(a[j] - b[j]) <= 1e-5 * (1 + std::abs(b[j])), "parameter " << k << " element " << j << ": "
                                                                                     << a[j] << " vs " << b[j]);
  }
  // The run did train: the control moved away from its start.
  const auto start = make_params()[0].to_vector<double>(), end = control[0].to_vector<double>();
  double moved = 0;
  for (size_t j = 0; j < start.size(); ++j) moved += std::abs(start[j] - end[j]);
  BOOST_TEST(moved > 1e-3);
}

BOOST_AUTO_TEST_SUITE_END()
