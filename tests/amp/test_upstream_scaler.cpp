// GradScaler cases ported from upstream: PyTorch's grad-scaling tests
// (test/test_cuda.py and the device-generic test/test_torch.py, run on the
// CPU) and MegEngine's imperative/python/test/unit/amp/test_grad_scaler.py.
// Each case names the test it follows; the expected values are upstream's.
// PyTorch's `scaler.scale(loss).backward()` is `gm.backward(scaler.scale(loss))`
// here, as users write it, and `scaler.unscale_(opt)` is
// `scaler.unscale(params)`.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace F = mixgrad::F;
using mg::DType;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// PyTorch's _create_scaling_models_optimizers: Linear(8, 8) -> Linear(8, 8),
// here as tensors [w0, b0, w1, b1] with the same values for control and
// scaling runs.
std::vector<mg::Tensor> make_params(uint64_t seed) {
  mg::manual_seed(seed);
  return {mg::uniform({8, 8}, -0.35, 0.35), mg::uniform({8}, -0.35, 0.35), mg::uniform({8, 8}, -0.35, 0.35),
          mg::uniform({8}, -0.35, 0.35)};
}

mg::Tensor model(const std::vector<mg::Tensor>& p, const mg::Tensor& x) {
  return F::linear(F::linear(x, p[0], p[1]), p[2], p[3]);
}

// PyTorch's _create_scaling_case: four (input, target) batches of [8, 8],
// MSE loss, SGD(lr = 1), the step at skip_iter = 2 gets an inf gradient.
constexpr int kSkipIter = 2;
std::vector<std::pair<mg::Tensor, mg::Tensor>> make_data() {
  mg::manual_seed(7);
  std::vector<std::pair<mg::Tensor, mg::Tensor>> data;
  for (int i = 0; i < 4; ++i) data.emplace_back(mg::normal({8, 8}), mg::normal({8, 8}));
  return data;
}

void fill_inf(const mg::Tensor& t) {
  float* g = t.grad().data<float>();
  for (int64_t i = 0; i < t.grad().numel(); ++i) g[i] = kInf;
}

struct Run {
  std::vector<mg::Tensor> params;
  mg::autodiff::GradManager gm;
  mg::optim::SGD opt;
  explicit Run(uint64_t seed = 42) : params(make_params(seed)), opt(params, {.lr = 1.0}) { gm.attach(params); }
};

// `run(data, run, scaler, try_scaling_api)` as in PyTorch's _run_scaling_case.
using RunFn = std::function<void(const std::vector<std::pair<mg::Tensor, mg::Tensor>>&, Run&, mg::amp::GradScaler&,
                                 bool try_scaling_api)>;

// PyTorch's _run_scaling_case: for enabled in (True, False), a control run
// without the scaling API and a scaled run with GradScaler(init_scale = 128,
// growth_factor = 2, growth_interval = 1, enabled) end with the same
// parameters; an enabled scale ends at 128 * 2^unskipped * 0.5^skipped, a
// disabled one at 1.
void run_scaling_case(const RunFn& run, int unskipped, int skipped, double atol = 1e-7) {
  for (bool enabled : {true, false}) {
    BOOST_TEST_CONTEXT("enabled = " << enabled) {
      const auto data = make_data();
      Run control, scaling;
      mg::amp::GradScaler scaler({.init_scale = 128.0, .growth_factor = 2.0, .growth_interval = 1, .enabled = enabled});
      run(data, control, scaler, false);
      run(data, scaling, scaler, true);
      if (enabled)
        BOOST_TEST(scaler.scale_factor() == 128.0 * std::pow(2.0, unskipped) * std::pow(0.5, skipped));
      else
        BOOST_TEST(scaler.scale_factor() == 1.0);
      for (size_t k = 0; k < control.params.size(); ++k) {
        const auto c = control.params[k].to_vector<double>(), s = scaling.params[k].to_vector<double>();
        for (size_t j = 0; j < c.size(); ++j)
          BOOST_TEST(std::abs(c[j] - s[j]) <= atol + 1e-5 * std::abs(c[j]),
                     "parameter " << k << " element " << j << ": " << s[j] << " vs " << c[j]);
      }
      // The runs trained: the parameters moved off their start.
      const auto start = make_params(42)[0].to_vector<double>(), end = control.params[0].to_vector<double>();
      double moved = 0;
      for (size_t j = 0; j < start.size(); ++j) moved += std::abs(start[j] - end[j]);
      BOOST_TEST(moved > 1e-3);
    }
  }
}

void scaled_backward(mg::amp::GradScaler& scaler, Run& r, const mg::Tensor& loss) {
  r.gm.backward(scaler.scale(loss));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(upstream_scaler)

// PyTorch test_grad_scaling_update_scale: growth 2, backoff 0.25, interval 2
// from a scale of 4: two clean steps give 4 (tracker 1), then 8 (tracker 0);
// a skipped step gives 2 (tracker 0).
BOOST_AUTO_TEST_CASE(pytorch_test_grad_scaling_update_scale) {
  mg::amp::GradScaler s({.init_scale = 4.0, .growth_factor = 2.0, .backoff_factor = 0.25, .growth_interval = 2});
  s.update();
  BOOST_TEST(s.growth_tracker() == 1);
  BOOST_TEST(s.scale_factor() == 4.0);
  s.update();
  BOOST_TEST(s.growth_tracker() == 0);
  BOOST_TEST(s.scale_factor() == 8.0);
  mg::Tensor p = mg::zeros({2});
  p.set_grad(mg::tensor({1.f, kInf}, {2}));
  s.unscale({p});
  BOOST_TEST(s.found_non_finite());
  s.update();
  BOOST_TEST(s.growth_tracker() == 0);
  BOOST_TEST(s.scale_factor() == 2.0);
}

// PyTorch test_grad_scaling_unscale (the multi-tensor cases and the
// "perfect storm" of _unscale_grads_): gradients of 4 unscaled with
// inv_scale 0.25 become exactly 1, contiguous, transposed, column-sliced
// (not dense) and float16 alike; an inf or NaN in any one of them is found.
BOOST_AUTO_TEST_CASE(pytorch_test_grad_scaling_unscale) {
  const auto g = [] { return mg::full({20, 20}, 4.0); };
  const auto sliced = [](const mg::Tensor& t) { return F::narrow(t, 1, 0, 5); };
  const auto with = [](mg::Tensor t, float v) {
    t.data<float>()[2 * 20 + 2] = v;
    return t;
  };
  struct Case {
    std::vector<mg::Tensor> grads;
    bool has_inf;
  };
  std::vector<Case> cases = {
      {{g(), g()}, false},
      {{g(), F::transpose(g(), 0, 1)}, false},
      {{g(), sliced(g())}, false},
      {{sliced(g()), sliced(g())}, false},
      {{g(), with(g(), kInf)}, true},
      {{g(), with(g(), kNaN)}, true},
      {{g(), sliced(with(g(), kInf))}, true},
      {{g(), sliced(with(g(), kNaN))}, true},
      {{with(g(), kInf), sliced(g())}, true},
      {{sliced(with(g(), kInf)), sliced(g())}, true},
      // mismatched dtypes in one call
      {{g(), mg::full({20, 20}, 4.0, DType::float16)}, false},
      // the perfect storm: dense, sliced and two float16 grads; inf in each
      {{g(), sliced(g()), mg::full({20, 20}, 4.0, DType::float16), mg::full({20, 20}, 4.0, DType::float16)}, false},
      {{with(g(), kInf), sliced(g()), mg::full({20, 20}, 4.0, DType::float16), mg::full({20, 20}, 4.0, DType::float16)},
       true},
      {{g(), sliced(with(g(), kInf)), mg::full({20, 20}, 4.0, DType::float16), mg::full({20, 20}, 4.0, DType::float16)},
       true},
      {{g(), sliced(g()), F::astype(with(g(), kInf), DType::float16), mg::full({20, 20}, 4.0, DType::float16)}, true},
      {{g(), sliced(g()), mg::full({20, 20}, 4.0, DType::float16), F::astype(with(g(), kInf), DType::float16)}, true},
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    BOOST_TEST_CONTEXT("case " << c) {
      mg::amp::GradScaler scaler(4.0);  // inv_scale 0.25
      std::vector<mg::Tensor> params;
      for (const auto& grad : cases[c].grads) {
        mg::Tensor p = mg::zeros(grad.shape(), grad.dtype());
        p.set_grad(grad);
        params.push_back(p);
      }
      scaler.unscale(params);
      BOOST_TEST(scaler.found_non_finite() == cases[c].has_inf);
      if (!cases[c].has_inf)
        for (const auto& grad : cases[c].grads)
          for (double v : grad.to(DType::float64).to_vector<double>()) BOOST_TEST(v == 1.0);
    }
  }
}

// PyTorch test_grad_scaling_state_dict: s1 loads s0's state and takes its
// scale 3, growth factor 4, backoff 0.5, interval 2 and a growth tracker of
// 0, whether or not s1 had already been used (lazy_init_scale).
BOOST_AUTO_TEST_CASE(pytorch_test_grad_scaling_state_dict) {
  for (bool lazy_init_scale : {true, false}) {
    BOOST_TEST_CONTEXT("lazy_init_scale = " << lazy_init_scale) {
      mg::amp::GradScaler s0({.init_scale = 3.0, .growth_factor = 4.0, .backoff_factor = 0.5, .growth_interval = 2});
      mg::amp::GradScaler s1({.init_scale = 6.0, .growth_factor = 7.0, .backoff_factor = 0.8, .growth_interval = 3});
      s1.update();  // a growth tracker for the load to overwrite
      BOOST_TEST(s1.growth_tracker() == 1);
      if (lazy_init_scale) {
        mg::autodiff::GradManager gm;
        mg::Tensor w = mg::ones({1});
        gm.attach(w);
        auto rec = gm.record();
        s1.backward(gm, F::sum(F::mul(w, 4.0)), mg::Tensor(),
            {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
      }
      s1.load_state_dict(s0.state_dict());
      BOOST_TEST(s1.scale_factor() == 3.0);
      BOOST_TEST(s1.options().growth_factor == 4.0);
      BOOST_TEST(s1.options().backoff_factor == 0.5);
      BOOST_TEST(s1.options().growth_interval == 2);
      BOOST_TEST(s1.growth_tracker() == 0);
    }
  }
}

// PyTorch test_grad_scale_will_not_overflow: a huge scale and growth factor
// 2^4 every step; after one Adam step the scale is still finite (here:
// exactly the limit, or half of it after an overflow) and so are the
// parameters. Upstream
// starts at init_scale = 1e38, which mixgrad refuses (ValueError: above
// kMaxScaleLimit = 2^126, where a float32 dy of one overflows); it starts at
// the largest scale it takes instead.
BOOST_AUTO_TEST_CASE(pytorch_test_grad_scale_will_not_overflow) {
  BOOST_CHECK_THROW(mg::amp::GradScaler({.init_scale = 1e38, .growth_factor = 16.0, .growth_interval = 1}),
                    mg::ValueError);
  mg::manual_seed(3);
  mg::Tensor w = mg::uniform({1, 5}, -0.4, 0.4), b = mg::uniform({1}, -0.4, 0.4);
  mg::autodiff::GradManager gm;
  gm.attach({w, b});
  mg::optim::Adam opt({w, b});
  mg::amp::GradScaler scaler({.init_scale = mg::amp::kMaxScaleLimit, .growth_factor = 16.0, .growth_interval = 1});
  const mg::Tensor x = mg::normal({1, 5});
  const mg::Tensor y = F::mul(mg::normal({1, 1}), 1e-30);
  {
    auto rec = gm.record();
    mg::Tensor l = F::mean(F::pow(F::sub(F::linear(x, w, b), y), 2.0));
    scaler.backward(gm, l, mg::Tensor(), {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
  }
  scaler.step(opt);
  const bool found = scaler.found_non_finite();
  scaler.update();
  // An overflow halves the scale; a clean step would grow it past the limit,
  // which the scaler refuses, so it stays there.
  BOOST_TEST(scaler.scale_factor() == (found ? mg::amp::kMaxScaleLimit / 2 : mg::amp::kMaxScaleLimit));
  for (const mg::Tensor& p : {w, b})
    for (double v : p.to_vector<double>()) BOOST_TEST(std::isfinite(v));
}

// PyTorch test_params_invalidated_with_grads_invalidated_between_unscale_and_step
// (Adam and AdamW, plain and with the unscale fused into the update): grads
// broken to inf / NaN after unscale_ are not checked again, so step()
// writes non-finite parameters, as upstream asserts.
BOOST_AUTO_TEST_CASE(pytorch_test_params_invalidated_with_grads_invalidated_between_unscale_and_step) {
  for (bool adamw : {false, true}) {
    for (bool fused : {false, true}) {
      BOOST_TEST_CONTEXT("adamw = " << adamw << ", fused = " << fused) {
        Run r;
        std::unique_ptr<mg::optim::Optimizer> opt;
        if (adamw)
          opt = std::make_unique<mg::optim::AdamW>(r.params,
                                                   mg::optim::AdamWOptions{.lr = 1.0, .step_supports_amp_scaling = fused});
        else
          opt = std::make_unique<mg::optim::Adam>(r.params,
                                                  mg::optim::AdamOptions{.lr = 1.0, .step_supports_amp_scaling = fused});
        mg::amp::GradScaler scaler({.init_scale = 128.0});
        for (const auto& [input, target] : make_data()) {
          opt->clear_grad();
          {
            mg::amp::autocast ac;
            auto rec = r.gm.record();
            scaled_backward(scaler, r, F::mse_loss(model(r.params, input), target));
          }
          scaler.unscale(r.params);
          for (size_t j = 0; j < r.params.size(); ++j) {
            float* g = r.params[j].grad().data<float>();
            for (int64_t e = 0; e < r.params[j].grad().numel(); ++e) g[e] = j % 2 ? kInf : kNaN;
          }
          scaler.step(*opt);
          scaler.update();
        }
        for (const auto& p : r.params) {
          bool non_finite = false;
          for (double v : p.to_vector<double>()) non_finite |= !std::isfinite(v);
          BOOST_TEST(non_finite);
        }
      }
    }
  }
}

// PyTorch test_grad_scaler_pass_itself: two optimizers over the parameters
// of one Linear(4, 1) step the same scaled gradients in one step
// (GradScaler(2), scaled backward of mean(m(x)), step(o1), step(o2)). Here
// in every order of a fused optimizer (step_supports_amp_scaling: it
// unscales inside its update and leaves the gradients scaled) and a plain
// one (the scaler unscales in place first): each optimizer must see the
// unscaled gradient, so both orders and kinds end at p0 - 2 * lr * g. Then
// unscale() still unscales what a fused step left scaled, once; a backward
// into the stepped gradients is refused until update().
BOOST_AUTO_TEST_CASE(pytorch_test_grad_scaler_pass_itself) {
  for (bool first_fused : {true, false}) {
    for (bool second_fused : {true, false}) {
      BOOST_TEST_CONTEXT("first fused = " << first_fused << ", second fused = " << second_fused) {
        mg::manual_seed(3);
        const mg::Tensor x = mg::normal({4, 4});
        const mg::Tensor w = mg::uniform({1, 4}, -0.5, 0.5), b = mg::uniform({1}, -0.5, 0.5);
        const std::vector<double> w0 = w.to_vector<double>(), b0 = b.to_vector<double>();
        mg::autodiff::GradManager gm;
        gm.attach({w, b});
        mg::optim::SGD o1({w, b}, {.lr = 0.1, .step_supports_amp_scaling = first_fused});
        mg::optim::SGD o2({w, b}, {.lr = 0.1, .step_supports_amp_scaling = second_fused});
        mg::amp::GradScaler scaler({.init_scale = 2.0});
        {
          auto rec = gm.record();
          scaler.backward(gm, F::mean(F::linear(x, w, b)), mg::Tensor(),
              {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
        }
        // The unscaled gradients: d mean(x w^T + b) / dw = column means of x, / db = 1.
        std::vector<double> gw(4, 0.0);
        const auto xs = x.to_vector<double>();
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j) gw[j] += xs[i * 4 + j] / 4.0;
        BOOST_TEST(std::abs(b.grad().to_vector<double>()[0] - 2.0) < 1e-6);  // still scaled by 2
        scaler.step(o1);
        scaler.step(o2);
        for (int j = 0; j < 4; ++j) BOOST_TEST(std::abs(w.to_vector<double>()[j] - (w0[j] - 0.2 * gw[j])) < 1e-6);
        BOOST_TEST(std::abs(b.to_vector<double>()[0] - (b0[0] - 0.2)) < 1e-6);
        // What is in memory: scaled if only fused optimizers stepped, unscaled otherwise.
        const double expected_b_grad = first_fused && second_fused ? 2.0 : 1.0;
        BOOST_TEST(std::abs(b.grad().to_vector<double>()[0] - expected_b_grad) < 1e-6);
        if (first_fused && second_fused) {
          scaler.unscale({w, b});  // left scaled by the fused steps: unscaled now, once
          BOOST_TEST(std::abs(b.grad().to_vector<double>()[0] - 1.0) < 1e-6);
        }
        BOOST_CHECK_THROW(scaler.unscale({w, b}), mg::StateError);  // already unscaled in this step
        {
          auto rec = gm.record();
          BOOST_CHECK_THROW(scaler.backward(gm, F::mean(F::linear(x, w, b)), mg::Tensor(),
              {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never}),
                            mg::StateError);
        }
        scaler.update();
        BOOST_TEST(scaler.scale_factor() == 2.0);  // clean step, growth interval not reached
      }
    }
  }
}

// A fused step leaves the gradients scaled; a backward into them before
// update() is refused with a message naming the fused step, and the
// gradients are untouched by the refusal.
BOOST_AUTO_TEST_CASE(a_backward_into_gradients_a_fused_step_left_scaled_is_refused) {
  const mg::Tensor w = mg::ones({3});
  mg::autodiff::GradManager gm;
  gm.attach({w});
  mg::optim::SGD opt({w}, {.lr = 0.5, .step_supports_amp_scaling = true});
  mg::amp::GradScaler scaler({.init_scale = 4.0});
  {
    auto rec = gm.record();
    scaler.backward(gm, F::sum(w), mg::Tensor(), {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
  }
  scaler.step(opt);
  BOOST_TEST(w.to_vector<double>() == std::vector<double>(3, 0.5));
  auto rec = gm.record();
  try {
    scaler.backward(gm, F::sum(w), mg::Tensor(), {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
    BOOST_ERROR("a backward into gradients a fused step left scaled was accepted");
  } catch (const mg::StateError& e) {
    BOOST_TEST(std::string(e.what()).find("unscales inside its update") != std::string::npos, e.what());
  }
  BOOST_TEST(w.grad().to_vector<double>() == std::vector<double>(3, 4.0));
}

// PyTorch test_grad_scaling_clipping: clip the scaled gradients to
// max_norm * scale, then step; the same parameters as clipping to max_norm
// without scaling.
BOOST_AUTO_TEST_CASE(pytorch_test_grad_scaling_clipping) {
  run_scaling_case(
      [](const auto& data, Run& r, mg::amp::GradScaler& scaler, bool try_scaling_api) {
        constexpr double kMaxNorm = 0.2;
        for (int i = 0; i < static_cast<int>(data.size()); ++i) {
          r.opt.clear_grad();
          auto rec = r.gm.record();
          mg::Tensor loss = F::mse_loss(model(r.params, data[i].first), data[i].second);
          if (try_scaling_api) {
            scaled_backward(scaler, r, loss);
            mg::optim::clip_grad_norm(r.params, kMaxNorm * scaler.scale_factor());
            if (i == kSkipIter && scaler.is_enabled()) fill_inf(r.params[2]);
            scaler.step(r.opt);
            scaler.update();
          } else {
            r.gm.backward(loss);
            mg::optim::clip_grad_norm(r.params, kMaxNorm);
            if (!scaler.is_enabled() || i != kSkipIter) r.opt.step();
          }
        }
      },
      3, 1, 1e-5);
}

// PyTorch test_grad_scaling_clipping_separate_unscale: unscale first, then
// clip to max_norm (a non-finite norm leaves the gradients alone), then step.
BOOST_AUTO_TEST_CASE(pytorch_test_grad_scaling_clipping_separate_unscale) {
  run_scaling_case(
      [](const auto& data, Run& r, mg::amp::GradScaler& scaler, bool try_scaling_api) {
        constexpr double kMaxNorm = 0.2;
        for (int i = 0; i < static_cast<int>(data.size()); ++i) {
          r.opt.clear_grad();
          auto rec = r.gm.record();
          mg::Tensor loss = F::mse_loss(model(r.params, data[i].first), data[i].second);
          if (try_scaling_api) {
            scaled_backward(scaler, r, loss);
            if (i == kSkipIter && scaler.is_enabled()) fill_inf(r.params[2]);
            scaler.unscale(r.params);
            mg::optim::clip_grad_norm(r.params, kMaxNorm);
            scaler.step(r.opt);
            scaler.update();
          } else {
            r.gm.backward(loss);
            mg::optim::clip_grad_norm(r.params, kMaxNorm);
            if (!scaler.is_enabled() || i != kSkipIter) r.opt.step();
          }
        }
      },
      3, 1);
}

// PyTorch test_grad_scaling_accumulation: two micro-batches of loss / 2 per
// step, scaler.step and update every second batch; two clean steps.
BOOST_AUTO_TEST_CASE(pytorch_test_grad_scaling_accumulation) {
  run_scaling_case(
      [](const auto& data, Run& r, mg::amp::GradScaler& scaler, bool try_scaling_api) {
        constexpr int kItersToAccumulate = 2;
        for (int i = 0; i < static_cast<int>(data.size()); ++i) {
          {
            auto rec = r.gm.record();
            mg::Tensor loss = F::div(F::mse_loss(model(r.params, data[i].first), data[i].second),
                                     static_cast<double>(kItersToAccumulate));
            if (try_scaling_api)
              scaled_backward(scaler, r, loss);
            else
              r.gm.backward(loss);
          }
          if ((i + 1) % kItersToAccumulate == 0) {
            if (try_scaling_api) {
              scaler.step(r.opt);
              scaler.update();
            } else {
              r.opt.step();
            }
            r.opt.clear_grad();
          }
        }
      },
      2, 0);
}

// PyTorch test_grad_scaling_multiple: two models, two optimizers, two losses
// mixing both outputs; an inf in model 1's gradient at skip_iter skips only
// optimizer 1's step; optimizer 0's gradients are unscaled separately first.
// The scale grows 3 times and backs off once.
BOOST_AUTO_TEST_CASE(pytorch_test_grad_scaling_multiple) {
  for (bool enabled : {true, false}) {
    BOOST_TEST_CONTEXT("enabled = " << enabled) {
      const auto data = make_data();
      mg::amp::GradScaler scaler({.init_scale = 128.0, .growth_factor = 2.0, .growth_interval = 1, .enabled = enabled});
      const auto run = [&](std::vector<mg::Tensor> p0, std::vector<mg::Tensor> p1, bool try_scaling_api) {
        mg::autodiff::GradManager gm;
        gm.attach(p0).attach(p1);
        mg::optim::SGD opt0(p0, {.lr = 1.0}), opt1(p1, {.lr = 1.0});
        for (int i = 0; i < static_cast<int>(data.size()); ++i) {
          opt0.clear_grad();
          opt1.clear_grad();
          auto rec = gm.record();
          const auto& [input, target] = data[i];
          mg::Tensor out0 = model(p0, input), out1 = model(p1, input);
          mg::Tensor loss0 = F::mse_loss(F::add(F::mul(out0, 0.3), F::mul(out1, 0.7)), target);
          mg::Tensor loss1 = F::mse_loss(F::sub(F::mul(out0, 0.6), F::mul(out1, 0.4)), target);
          if (try_scaling_api) {
            gm.backward(scaler.scale({loss0, loss1}));
            if (i == kSkipIter && scaler.is_enabled()) fill_inf(p1[2]);
            scaler.unscale(p0);
            scaler.step(opt0);
            scaler.step(opt1);
            scaler.update();
          } else {
            gm.backward({loss0, loss1});
            opt0.step();
            if (!scaler.is_enabled() || i != kSkipIter) opt1.step();
          }
        }
      };
      const auto c0 = make_params(42), c1 = make_params(43), s0 = make_params(42), s1 = make_params(43);
      run(c0, c1, false);
      run(s0, s1, true);
      BOOST_TEST(scaler.scale_factor() == (enabled ? 128.0 * 8.0 * 0.5 : 1.0));
      for (size_t k = 0; k < 8; ++k) {
        const auto c = (k < 4 ? c0[k] : c1[k - 4]).to_vector<double>();
        const auto s = (k < 4 ? s0[k] : s1[k - 4]).to_vector<double>();
        for (size_t j = 0; j < c.size(); ++j)
          BOOST_TEST(std::abs(c[j] - s[j]) <= 1e-7 + 1e-5 * std::abs(c[j]),
                     "parameter " << k << " element " << j << ": " << s[j] << " vs " << c[j]);
      }
    }
  }
}

// PyTorch test_grad_scaling_autocast (SGD): the scaled run's forward under
// autocast in float16 (upstream's CUDA dtype, on the CPU here) ends within
// upstream's atol 1e-3 of the float32 control without autocast or scaling.
BOOST_AUTO_TEST_CASE(pytorch_test_grad_scaling_autocast) {
  run_scaling_case(
      [](const auto& data, Run& r, mg::amp::GradScaler& scaler, bool try_scaling_api) {
        for (int i = 0; i < static_cast<int>(data.size()); ++i) {
          r.opt.clear_grad();
          auto rec = r.gm.record();
          mg::Tensor loss;
          {
            mg::amp::autocast ac(try_scaling_api, DType::float16);
            loss = F::mse_loss(model(r.params, data[i].first), data[i].second);
          }
          if (try_scaling_api) {
            scaled_backward(scaler, r, loss);
            if (i == kSkipIter && scaler.is_enabled()) fill_inf(r.params[2]);
            scaler.step(r.opt);
            scaler.update();
          } else {
            r.gm.backward(loss);
            if (!scaler.is_enabled() || i != kSkipIter) r.opt.step();
          }
        }
      },
      3, 1, 1e-3);
}

// MegEngine test_grad_scaler: y = x + 1 attached inside the recording, loss =
// y + 1; backward without unscaling leaves y.grad == scale_factor, unscale
// makes it 1; three times. A final unscale of attached tensors without a
// gradient ("handle None elements") is a no-op.
BOOST_AUTO_TEST_CASE(megengine_test_grad_scaler) {
  mg::autodiff::GradManager gm;
  mg::amp::GradScaler scaler;
  const mg::Tensor x = mg::full({}, 1.0);
  for (int i = 0; i < 3; ++i) {
    mg::Tensor y;
    {
      auto rec = gm.record();
      y = F::add(x, 1.0);
      gm.attach(y);
      mg::Tensor loss = F::add(y, 1.0);
      scaler.backward(gm, loss, mg::Tensor(), {.unscale_grad = false});
    }
    BOOST_TEST(y.grad().to_vector<double>() == std::vector<double>{16.0});  // the default init_scale, 2^4
    scaler.unscale(gm.attached_tensors());
    BOOST_TEST(y.grad().to_vector<double>() == std::vector<double>{1.0});
    scaler.update();
  }
  mg::Tensor no_grad = mg::ones({2});
  gm.attach(no_grad);
  BOOST_CHECK_NO_THROW(scaler.unscale({no_grad}));
  BOOST_TEST(!no_grad.grad().defined());
  BOOST_TEST(!scaler.found_non_finite());
}

BOOST_AUTO_TEST_SUITE_END()
