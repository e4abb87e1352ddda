// Adam, AMSGrad and AdamW against a reference written out here in double.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "mixgrad/ops/creation.hpp"

namespace mg = mixgrad;
using Vec = std::vector<double>;

namespace {

mg::Tensor make(const Vec& v, mg::DType dt = mg::DType::float32) {
  return mg::tensor(v, {static_cast<int64_t>(v.size())}, dt);
}

struct RefAdam {
  RefAdam(double lr_, double b1_, double b2_, double eps_, double wd_, bool amsgrad_ = false, bool decoupled_ = false)
      : lr(lr_), b1(b1_), b2(b2_), eps(eps_), wd(wd_), amsgrad(amsgrad_), decoupled(decoupled_) {}
  double lr, b1, b2, eps, wd;
  bool amsgrad, decoupled;
  Vec m, v, vmax;
  int t = 0;
  void step(Vec& p, const Vec& grad) {
    if (m.empty()) m = v = vmax = Vec(p.size(), 0.0);
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      double g = grad[i];
      if (decoupled) {
        p[i] = p[i] - lr * wd * p[i];
      } else {
        g = g + wd * p[i];
      }
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      vmax[i] = std::max(vmax[i], v[i]);
      const double mhat = m[i] / (1 - std::pow(b1, t));
      const double vhat = (amsgrad ? vmax[i] : v[i]) / (1 - std::pow(b2, t));
      p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
};

// Gradient magnitudes vary so that v shrinks on some steps (AMSGrad matters).
const std::vector<Vec> kGrads = {
    {0.5, -1.0, 2.0, 0.25}, {-0.3, 0.7, 1.5, -2.0}, {0.01, 0.02, -0.05, 0.125}, {1.0, -0.5, 0.3, 0.0}};
const Vec kInit = {1.0, -2.0, 0.5, 3.0};

void check_close(const mg::Tensor& t, const Vec& want, double tol) {
  const auto got = t.to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i)
    BOOST_TEST(std::abs(got[i] - want[i]) <= tol, i << ": " << got[i] << " vs " << want[i]);
}

template <class Opt, class Options>
void run_case(const Options& o, bool decoupled, mg::DType dt, double tol) {
  auto p = make(kInit, dt);
  Opt opt({p}, o);
  RefAdam ref{o.lr, o.betas.first, o.betas.second, o.eps, o.weight_decay, o.amsgrad, decoupled};
  Vec want = kInit;
  for (const Vec& g : kGrads) {
    p.set_grad(make(g, dt));
    opt.step().clear_grad();
    ref.step(want, g);
    BOOST_TEST_CONTEXT("lr " << o.lr << " step " << ref.t) check_close(p, want, tol);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(adam)

BOOST_AUTO_TEST_CASE(adam_matches_reference) {
  using mg::optim::Adam;
  run_case<Adam>(mg::optim::AdamOptions{.lr = 0.1}, false, mg::DType::float32, 2e-6);
  run_case<Adam>(mg::optim::AdamOptions{.lr = 0.01, .betas = {0.8, 0.9}, .eps = 1e-3}, false, mg::DType::float32, 1e-6);
  run_case<Adam>(mg::optim::AdamOptions{.lr = 0.05, .weight_decay = 0.1}, false, mg::DType::float32, 2e-6);
  run_case<Adam>(mg::optim::AdamOptions{.lr = 0.05, .betas = {0.5, 0.6}, .amsgrad = true}, false, mg::DType::float32, 2e-6);
  run_case<Adam>(mg::optim::AdamOptions{.lr = 0.05, .weight_decay = 0.1, .amsgrad = true}, false, mg::DType::float64, 1e-13);
}

BOOST_AUTO_TEST_CASE(first_step_is_lr_times_sign) {
  // With bias correction the first step is lr * g / (|g| + eps): about lr.
  auto p = make({1.0, 1.0});
  mg::optim::Adam opt({p}, {.lr = 0.1});
  p.set_grad(make({3.0, -0.001}));
  opt.step();
  BOOST_TEST(p.at<float>({0}) == 0.9f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(p.at<float>({1}) == 1.1f, boost::test_tools::tolerance(1e-5f));
}

BOOST_AUTO_TEST_CASE(adamw_decouples_weight_decay) {
  using mg::optim::AdamW;
  run_case<AdamW>(mg::optim::AdamWOptions{.lr = 0.05}, true, mg::DType::float32, 2e-6);  // wd 0.01 by default
  run_case<AdamW>(mg::optim::AdamWOptions{.lr = 0.05, .weight_decay = 0.5}, true, mg::DType::float32, 2e-6);
  run_case<AdamW>(mg::optim::AdamWOptions{.lr = 0.05, .weight_decay = 0.5, .amsgrad = true}, true, mg::DType::float64,
                  1e-13);
  // Decoupled: with a zero gradient Adam's L2 term still moves p through the
  // normalised step (about lr), AdamW only shrinks it by lr * wd * p.
  auto a = make({2.0});
  auto w = make({2.0});
  mg::optim::Adam adam({a}, {.lr = 0.1, .weight_decay = 0.5});
  mg::optim::AdamW adamw({w}, {.lr = 0.1, .weight_decay = 0.5});
  a.set_grad(make({0.0}));
  w.set_grad(make({0.0}));
  adam.step();
  adamw.step();
  BOOST_TEST(a.item<float>() == 1.9f, boost::test_tools::tolerance(1e-5f));
  BOOST_TEST(w.item<float>() == 1.9f, boost::test_tools::tolerance(1e-6f));  // 2 * (1 - 0.05)
  adam.step();
  adamw.step();
  BOOST_TEST(w.item<float>() == 1.805f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(std::abs(a.item<float>() - 1.8f) < 1e-3f);  // differs from AdamW's 1.805
}

BOOST_AUTO_TEST_CASE(bias_correction_counts_each_parameters_own_steps) {
  auto a = make(kInit);
  auto b = make(kInit);
  mg::optim::Adam opt({a, b}, {.lr = 0.1, .betas = {0.5, 0.7}});
  RefAdam ra{0.1, 0.5, 0.7, 1e-8, 0}, rb{0.1, 0.5, 0.7, 1e-8, 0};
  Vec wa = kInit, wb = kInit;
  for (size_t s = 0; s < kGrads.size(); ++s) {
    a.set_grad(make(kGrads[s]));
    ra.step(wa, kGrads[s]);
    if (s % 2 == 1) {  // b only gets a gradient every other step
      b.set_grad(make(kGrads[s]));
      rb.step(wb, kGrads[s]);
    }
    opt.step().clear_grad();
  }
  check_close(a, wa, 2e-6);
  check_close(b, wb, 2e-6);
  BOOST_TEST(opt.step_count(0) == 4);
  BOOST_TEST(opt.step_count(1) == 2);
}

BOOST_AUTO_TEST_CASE(low_precision_parameter_keeps_float32_moments) {
  auto p = make(kInit, mg::DType::bfloat16);
  mg::optim::Adam opt({p}, {.lr = 0.01});
  p.set_grad(make(kGrads[0], mg::DType::bfloat16));
  opt.step();
  const auto sd = opt.state_dict();
  BOOST_TEST(sd.at("state.0.exp_avg").dtype() == mg::DType::float32);
  // m = 0.1 * g exactly in float32 (the bfloat16 gradients are exact).
  check_close(sd.at("state.0.exp_avg"), {0.05, -0.1, 0.2, 0.025}, 1e-7);
  BOOST_TEST(p.dtype() == mg::DType::bfloat16);
}

BOOST_AUTO_TEST_CASE(invalid_options_throw_at_construction) {
  auto p = make({1.0});
  BOOST_CHECK_THROW(mg::optim::Adam({p}, {.lr = -1e-3}), mg::ValueError);
  BOOST_CHECK_THROW(mg::optim::Adam({p}, {.betas = {1.0, 0.999}}), mg::ValueError);
  BOOST_CHECK_THROW(mg::optim::Adam({p}, {.betas = {0.9, -0.1}}), mg::ValueError);
  BOOST_CHECK_THROW(mg::optim::Adam({p}, {.eps = -1.0}), mg::ValueError);
  BOOST_CHECK_THROW(mg::optim::Adam({p}, {.weight_decay = -0.1}), mg::ValueError);
  BOOST_CHECK_THROW(mg::optim::AdamW({p}, {.betas = {0.9, 1.0}}), mg::ValueError);
  BOOST_CHECK_NO_THROW(mg::optim::Adam({p}, {.betas = {0.0, 0.0}}));
}

BOOST_AUTO_TEST_SUITE_END()
