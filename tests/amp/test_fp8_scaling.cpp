// FP8 regions with delayed scaling (mixgrad/amp/fp8.hpp): the scale update
// and the amax history against hand-computed values, the emulated linear and
// its straight-through gradients against float64 references on the rounded
// operands, training against bfloat16, the checkpoint round trip and errors.
#include <boost/test/unit_test.hpp>

#include <cfloat>
#include <cmath>
#include <string>
#include <vector>

#include "amp/fp8_gemm.hpp"
#include "mixgrad/amp/fp8.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace F = mg::F;
namespace amp = mg::amp;
using mg::DType;
using mg::Fp8Format;

namespace {

// A [n] tensor of zeros with `amax` at position 1 (and -amax / 2 at 0).
mg::Tensor with_amax(int64_t rows, int64_t cols, float amax) {
  std::vector<float> v(static_cast<size_t>(rows * cols), 0.f);
  v[0] = -amax / 2;
  v[1] = amax;
  return mg::tensor(v, {rows, cols});
}

// linear(x, w) through one FP8 site, then its backward from dy: x.grad() is set.
void site(amp::Fp8Scaler& fp8, const mg::Tensor& x, const mg::Tensor& w, const mg::Tensor& dy) {
  mg::autodiff::GradManager gm;
  gm.attach({x});
  auto rec = gm.record();
  mg::Tensor y;
  {
    amp::fp8_autocast region(fp8);
    y = F::linear(x, w);
  }
  gm.backward(y, dy);
}

// One step of a single linear site: x, w and the upstream gradient with the
// given amaxes, then update().
void step(amp::Fp8Scaler& fp8, float ax, float aw, float ag) {
  site(fp8, with_amax(2, 4, ax), with_amax(3, 4, aw), with_amax(2, 3, ag));
  fp8.update();
}

std::vector<float> values(const mg::Tensor& t) { return t.contiguous().to_vector<float>(); }

// The value of `v` rounded by the library, for the references below.
std::vector<double> rounded(const mg::Tensor& v, float scale, Fp8Format f) {
  return F::fp8_quantize(v, mg::scalar(scale), f).to_vector<double>();
}

// One linear site x [m, k] . w [n, k]^T + b after a step that set the
// scales, with its forward and gradients checked against float64 references
// on the operands rounded by the library: the site emulated or through the
// FP8 GEMMs, the same arithmetic either way.
void check_linear_site(int64_t m, int64_t k, int64_t n) {
  amp::Fp8Scaler fp8({.amax_history_len = 2});
  mg::manual_seed(3);
  step(fp8, 3, 0.5f, 0.01f);  // scales 448/3, 448/0.5, 57344/0.01
  const auto sc = values(fp8.scale(0));
  mg::Tensor x = F::mul(mg::normal({m, k}), 0.8), w = F::mul(mg::normal({n, k}), 0.1), b = mg::normal({n});
  mg::Tensor dy = F::mul(mg::normal({m, n}), 0.003);
  mg::autodiff::GradManager gm;
  gm.attach({x, w, b});
  mg::Tensor y;
  {
    auto rec = gm.record();
    {
      amp::fp8_autocast region(fp8);
      y = F::linear(x, w, b);
    }
    gm.backward(y, dy);
  }
  BOOST_TEST(y.dtype() == DType::float32);
  const auto qx = rounded(x, sc[0], Fp8Format::e4m3), qw = rounded(w, sc[1], Fp8Format::e4m3);
  const auto qg = rounded(dy, sc[2], Fp8Format::e5m2);
  const auto bv = b.to_vector<double>(), dyv = dy.to_vector<double>();
  const auto yv = y.to_vector<double>(), gx = x.grad().to_vector<double>(), gw = w.grad().to_vector<double>();
  const auto gb = b.grad().to_vector<double>();
  // Errors relative to the largest reference value of each result.
  double ey = 0, egx = 0, egw = 0, egb = 0, my = 0, mgx = 0, mgw = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t o = 0; o < n; ++o) {
      double acc = 0;
      for (int64_t c = 0; c < k; ++c) acc += qx[i * k + c] * qw[o * k + c];
      const double ref = acc / (double(sc[0]) * sc[1]) + bv[o];
      ey = std::max(ey, std::abs(yv[i * n + o] - ref));
      my = std::max(my, std::abs(ref));
    }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c = 0; c < k; ++c) {
      double acc = 0;  // dequantized gradient times dequantized weight
      for (int64_t o = 0; o < n; ++o) acc += qg[i * n + o] / sc[2] * (qw[o * k + c] / sc[1]);
      egx = std::max(egx, std::abs(gx[i * k + c] - acc));
      mgx = std::max(mgx, std::abs(acc));
    }
  for (int64_t o = 0; o < n; ++o) {
    double sum = 0;  // the bias gets the unrounded gradient
    for (int64_t i = 0; i < m; ++i) sum += dyv[i * n + o];
    egb = std::max(egb, std::abs(gb[o] - sum));
    for (int64_t c = 0; c < k; ++c) {
      double acc = 0;
      for (int64_t i = 0; i < m; ++i) acc += qg[i * n + o] / sc[2] * (qx[i * k + c] / sc[0]);
      egw = std::max(egw, std::abs(gw[o * k + c] - acc));
      mgw = std::max(mgw, std::abs(acc));
    }
  }
  ey /= my, egx /= mgx, egw /= mgw;
  BOOST_TEST(ey < 1e-6, "forward: relative error " << ey);
  BOOST_TEST(egx < 1e-6, "input gradient: relative error " << egx);
  BOOST_TEST(egw < 1e-6, "weight gradient: relative error " << egw);
  BOOST_TEST(egb < 1e-5, "bias gradient: error " << egb);
  // The operands really were rounded: the float32 product differs.
  BOOST_TEST(F::max(F::abs(F::sub(y, F::linear(x, w, b)))).item<double>() > 1e-4);
  // The site recorded this step's amaxes.
  const auto h = values(fp8.amax_history(0));
  BOOST_TEST(h[0] == F::max(F::abs(x)).item<float>());
  BOOST_TEST(h[2] == F::max(F::abs(dy)).item<float>());
}

// Sets how FP8 sites multiply for the scope's lifetime.
class GemmUse {
 public:
  explicit GemmUse(amp::detail::Fp8GemmUse use) : saved_(amp::detail::fp8_gemm_use()) {
    amp::detail::set_fp8_gemm_use(use);
  }
  ~GemmUse() { amp::detail::set_fp8_gemm_use(saved_); }
  GemmUse(const GemmUse&) = delete;
  GemmUse& operator=(const GemmUse&) = delete;

 private:
  amp::detail::Fp8GemmUse saved_;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(fp8_scaling)

BOOST_AUTO_TEST_CASE(max_over_a_rolling_window_with_margin) {
  amp::Fp8Scaler fp8({.amax_history_len = 3, .margin = 1});
  const float e4 = 448.f / 2, e5 = 57344.f / 2;
  step(fp8, 2, 8, 16);
  BOOST_TEST(fp8.num_sites() == 1u);
  BOOST_TEST(values(fp8.scale(0)) == (std::vector<float>{e4 / 2, e4 / 8, e5 / 16}));
  // Rolled by -1 and row 0 zeroed: [0, 0, step 1].
  BOOST_TEST(values(fp8.amax_history(0)) == (std::vector<float>{0, 0, 0, 0, 0, 0, 2, 8, 16}));
  step(fp8, 1, 16, 4);  // window {2, 1}: max 2; weight's 16; gradient's 16
  BOOST_TEST(values(fp8.scale(0)) == (std::vector<float>{e4 / 2, e4 / 16, e5 / 16}));
  step(fp8, 0.5f, 1, 1);  // window {2, 1, 0.5}
  BOOST_TEST(values(fp8.scale(0)) == (std::vector<float>{e4 / 2, e4 / 16, e5 / 16}));
  step(fp8, 0.25f, 1, 1);  // step 1 left the window: {1, 0.5, 0.25}, {16, 1, 1}, {4, 1, 1}
  BOOST_TEST(values(fp8.scale(0)) == (std::vector<float>{e4 / 1, e4 / 16, e5 / 4}));
  BOOST_TEST(values(fp8.amax_history(0)) == (std::vector<float>{0, 0, 0, 0.5f, 1, 1, 0.25f, 1, 1}));
}

BOOST_AUTO_TEST_CASE(most_recent_zero_and_non_finite_amaxes) {
  amp::Fp8Scaler fp8({.amax_history_len = 4, .amax_compute_algo = amp::Fp8Recipe::AmaxCompute::most_recent,
                      .fp8_format = amp::Fp8Recipe::Format::e4m3});
  step(fp8, 4, 2, 8);
  BOOST_TEST(values(fp8.scale(0)) == (std::vector<float>{112, 224, 56}));  // E4M3 for the gradient too
  step(fp8, 1, 2, 2);
  BOOST_TEST(values(fp8.scale(0)) == (std::vector<float>{448, 224, 224}));
  step(fp8, 0, 2, INFINITY);  // amax 0 and inf keep their scales
  BOOST_TEST(values(fp8.scale(0)) == (std::vector<float>{448, 224, 224}));
  step(fp8, 1e-40f, 2, 2);  // 448 / 1e-40 overflows float32: the largest float instead
  BOOST_TEST(values(fp8.scale(0))[0] == FLT_MAX);
}

BOOST_AUTO_TEST_CASE(the_amax_reduction_sees_every_site_and_its_result_is_used) {
  amp::Fp8Scaler fp8({.amax_history_len = 2});
  mg::Shape seen;
  fp8.set_amax_reduction([&](const mg::Tensor& amax) {
    seen = amax.shape();
    float* a = mg::Tensor(amax).data<float>();  // in place, as an all-reduce with a rank of twice the amaxes
    for (int64_t i = 0; i < amax.numel(); ++i) a[i] *= 2;
  });
  step(fp8, 2, 8, 16);
  BOOST_TEST(seen == (mg::Shape{1, 3}));
  BOOST_TEST(values(fp8.scale(0)) == (std::vector<float>{448.f / 4, 448.f / 16, 57344.f / 32}));
}

BOOST_AUTO_TEST_CASE(under_autocast_a_site_returns_the_low_dtype) {
  amp::Fp8Scaler fp8;
  const mg::Tensor x = mg::normal({2, 4}), w = mg::normal({3, 4});
  amp::autocast bf16;
  amp::fp8_autocast region(fp8);
  BOOST_TEST(F::linear(x, w).dtype() == DType::bfloat16);
  BOOST_TEST(F::matmul(x, F::transpose(w, 0, 1)).dtype() == DType::bfloat16);
}

BOOST_AUTO_TEST_CASE(linear_forward_and_gradients_match_float64_on_the_rounded_operands) {
  const int64_t before = amp::detail::fp8_gemm_calls();
  check_linear_site(5, 16, 7);  // extents not multiples of 16: emulated on every device
  BOOST_TEST(amp::detail::fp8_gemm_calls() == before);
}

BOOST_AUTO_TEST_CASE(the_fp8_gemm_path_computes_the_same_site_with_three_gemms) {
  // The CPU's fp8_gemm is the float32 reference on the decoded codes: the
  // path that runs cuBLASLt's FP8 GEMMs on a GPU, checked here.
  const GemmUse always(amp::detail::Fp8GemmUse::always);
  const int64_t before = amp::detail::fp8_gemm_calls();
  check_linear_site(32, 48, 16);
  BOOST_TEST(amp::detail::fp8_gemm_calls() - before == 3);  // forward, input gradient, weight gradient
}

BOOST_AUTO_TEST_CASE(the_gemm_path_agrees_with_emulation_over_training_steps_and_in_bfloat16) {
  // Three steps of a two-layer MLP under bf16 autocast, with update(): the
  // parameters and scales of both paths agree to float32 rounding (the
  // products add in another order).
  auto train = [](amp::detail::Fp8GemmUse use, std::vector<mg::Tensor>& params, mg::Tensor& scale0) {
    const GemmUse scope(use);
    mg::manual_seed(11);
    mg::nn::Sequential net(mg::nn::Linear(32, 64), mg::nn::ReLU(), mg::nn::Linear(64, 16));
    amp::Fp8Scaler fp8({.amax_history_len = 4});
    mg::optim::SGD opt(net.parameters(), {.lr = 0.1});
    mg::autodiff::GradManager gm;
    gm.attach(net.parameters());
    for (int s = 0; s < 3; ++s) {
      const mg::Tensor x = mg::normal({16, 32}), t = mg::normal({16, 16});
      {
        auto rec = gm.record();
        mg::Tensor loss;
        {
          amp::autocast bf16;
          amp::fp8_autocast region(fp8);
          loss = F::mse_loss(F::astype(net(x), DType::float32), t);
        }
        gm.backward(loss);
      }
      opt.step().clear_grad();
      fp8.update();
    }
    params = net.parameters();
    scale0 = fp8.scale(0);
  };
  std::vector<mg::Tensor> emulated, gemm;
  mg::Tensor s_emulated, s_gemm;
  const int64_t before = amp::detail::fp8_gemm_calls();
  train(amp::detail::Fp8GemmUse::never, emulated, s_emulated);
  BOOST_TEST(amp::detail::fp8_gemm_calls() == before);
  train(amp::detail::Fp8GemmUse::always, gemm, s_gemm);
  BOOST_TEST(amp::detail::fp8_gemm_calls() - before == 3 * 2 * 3);  // steps x sites x GEMMs
  for (size_t i = 0; i < gemm.size(); ++i) {
    const double diff = F::max(F::abs(F::sub(gemm[i], emulated[i]))).item<double>();
    const double size = F::max(F::abs(emulated[i])).item<double>();
    BOOST_TEST(diff <= 1e-5 * size, "parameter " << i << ": " << diff << " of " << size);
  }
  const auto sg = values(s_gemm), se = values(s_emulated);  // from amaxes of values that agree so
  for (size_t i = 0; i < se.size(); ++i) BOOST_TEST(std::abs(sg[i] - se[i]) <= 1e-5 * se[i], "scale " << i);
}

BOOST_AUTO_TEST_CASE(automatic_use_emulates_where_no_fp8_gemm_exists) {
  // Operands on the CPU, whose fp8_gemm is only the reference.
  amp::Fp8Scaler fp8;
  const int64_t before = amp::detail::fp8_gemm_calls();
  const mg::Tensor x = mg::normal({32, 32}), w = mg::normal({16, 32});
  site(fp8, x, w, mg::normal({32, 16}));
  BOOST_TEST(amp::detail::fp8_gemm_calls() == before);
}

BOOST_AUTO_TEST_CASE(matmul_sites_number_in_call_order_and_keep_their_kind) {
  amp::Fp8Scaler fp8;
  mg::Tensor a = mg::normal({2, 3, 4}), b = mg::normal({4, 5});
  {
    amp::fp8_autocast region(fp8);
    const mg::Tensor y = F::matmul(a, b);
    BOOST_TEST(y.shape() == (mg::Shape{2, 3, 5}));
    F::linear(a, F::transpose(b, 0, 1));
    {
      amp::fp8_autocast off(fp8, false);
      F::matmul(a, b);  // not a site
    }
  }
  BOOST_TEST(fp8.num_sites() == 2u);
  amp::fp8_autocast region(fp8);
  F::matmul(a, b);
  try {
    F::matmul(a, b);
    BOOST_ERROR("a site that changes kind: expected StateError");
  } catch (const mg::StateError& e) {
    BOOST_TEST(std::string(e.what()).find("product 1") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_CASE(mlp_trained_in_fp8_stays_close_to_bfloat16) {
  mg::manual_seed(1);
  const mg::Tensor x = mg::normal({64, 16});
  const mg::Tensor labels = F::argmax(F::matmul(x, mg::normal({16, 4})), 1);
  auto train = [&](bool fp8_on) {
    mg::manual_seed(2);
    mg::nn::Sequential net(mg::nn::Linear(16, 32), mg::nn::ReLU(), mg::nn::Linear(32, 4));
    mg::autodiff::GradManager gm;
    gm.attach(net.parameters());
    mg::optim::SGD opt(net.parameters(), {.lr = 0.2});
    mg::amp::GradScaler scaler;
    amp::Fp8Scaler fp8({.amax_history_len = 16});
    double loss_value = 0;
    for (int s = 0; s < 150; ++s) {
      auto rec = gm.record();
      mg::Tensor loss;
      {
        amp::autocast bf16;
        amp::fp8_autocast region(fp8, fp8_on);
        loss = F::cross_entropy(net(x), labels);
      }
      loss_value = loss.item<double>();
      scaler.backward(gm, loss);
      scaler.step(opt);
      opt.clear_grad();
      fp8.update();
    }
    BOOST_TEST(fp8.num_sites() == (fp8_on ? 2u : 0u));
    return loss_value;
  };
  const double bf16 = train(false), fp8 = train(true);
  BOOST_TEST_MESSAGE("final loss: bfloat16 " << bf16 << ", fp8 " << fp8);
  BOOST_TEST(bf16 < 0.5);
  BOOST_TEST(std::abs(fp8 - bf16) < 0.05 * bf16, "bfloat16 " << bf16 << ", fp8 " << fp8);
}

BOOST_AUTO_TEST_CASE(checkpoint_round_trip_and_bad_dicts) {
  amp::Fp8Scaler fp8({.amax_history_len = 3, .margin = 2});
  step(fp8, 2, 8, 16);
  step(fp8, 1, 4, 2);
  const mg::StateDict saved = fp8.state_dict();
  amp::Fp8Scaler loaded;
  loaded.load_state_dict(saved);
  BOOST_TEST(loaded.recipe().amax_history_len == 3);
  BOOST_TEST(loaded.recipe().margin == 2);
  BOOST_TEST(values(loaded.scale(0)) == values(fp8.scale(0)));
  BOOST_TEST(values(loaded.amax_history(0)) == values(fp8.amax_history(0)));
  step(fp8, 0.5f, 1, 1);
  step(loaded, 0.5f, 1, 1);  // the same next step gives the same scales
  BOOST_TEST(values(loaded.scale(0)) == values(fp8.scale(0)));

  mg::StateDict bad = saved;
  bad.insert_or_assign("site.0.amax_history", mg::zeros({4, 3}));
  amp::Fp8Scaler untouched;
  BOOST_CHECK_EXCEPTION(untouched.load_state_dict(bad), mg::ShapeError, [](const mg::ShapeError& e) {
    return std::string(e.what()).find("Fp8Scaler::load_state_dict") != std::string::npos;
  });
  BOOST_TEST(untouched.num_sites() == 0u);
  BOOST_TEST(untouched.recipe().amax_history_len == 1024);
  bad = saved;
  bad.erase("site.0.scale");
  BOOST_CHECK_THROW(untouched.load_state_dict(bad), mg::ValueError);
}

BOOST_AUTO_TEST_CASE(bad_recipes_and_inputs_name_the_op) {
  auto names = [](const char* what) {
    return [what](const std::exception& e) { return std::string(e.what()).find(what) != std::string::npos; };
  };
  BOOST_CHECK_EXCEPTION(amp::Fp8Scaler({.amax_history_len = 0}), mg::ValueError, names("Fp8Scaler: amax_history_len"));
  BOOST_CHECK_EXCEPTION(amp::Fp8Scaler({.margin = -1}), mg::ValueError, names("Fp8Scaler: margin"));
  BOOST_CHECK_EXCEPTION(F::fp8_round(mg::arange(4), Fp8Format::e4m3), mg::DTypeError, names("fp8_round"));
  const mg::Tensor x = mg::normal({4});
  BOOST_CHECK_EXCEPTION(F::fp8_quantize(x, mg::scalar(1.0, DType::float64), Fp8Format::e4m3), mg::DTypeError,
                        names("fp8_quantize: scale must be float32"));
  BOOST_CHECK_EXCEPTION(F::fp8_quantize(x, mg::ones({2}), Fp8Format::e4m3), mg::ShapeError, names("fp8_quantize"));
  amp::Fp8Scaler fp8;
  BOOST_CHECK_EXCEPTION(fp8.scale(0), mg::ValueError, names("Fp8Scaler: site 0"));
}

BOOST_AUTO_TEST_CASE(an_overflowed_gradient_stays_non_finite_for_the_grad_scaler) {
  amp::Fp8Scaler fp8;
  const mg::Tensor x = mg::normal({2, 4}), w = mg::normal({3, 4});
  site(fp8, x, w, mg::tensor({INFINITY, 0.f, 0.f, 0.f, 0.f, 0.f}, {2, 3}));
  BOOST_TEST(!std::isfinite(x.grad().at<float>({0, 0})));
}

BOOST_AUTO_TEST_SUITE_END()
