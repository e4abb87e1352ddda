// The unscale fused into the optimizer's update (PyTorch's
// `_step_supports_amp_scaling`, as in test_torch.py's
// test_grad_scaling_autocast_fused_optimizers: the fused step must agree
// with the separate unscale-then-step path and skip overflowed steps).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "backend/multi_tensor.hpp"
#include "mixgrad/mixgrad.hpp"
#include "mixgrad/ops/creation.hpp"

namespace mg = mixgrad;
using mg::DType;
using Vec = std::vector<double>;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Vec values(const mg::Tensor& t) { return t.to(DType::float64).to_vector<double>(); }

// Two parameters (a matrix and a vector) of `dtype`, the same values in
// every model built.
struct Model {
  mg::Tensor w, b;
  mg::autodiff::GradManager gm;
  explicit Model(DType dtype) {
    w = mg::tensor(Vec{0.5, -1.0, 2.0, 0.25, 3.0, -0.75}, {2, 3}, dtype);
    b = mg::tensor(Vec{0.125, -0.5, 1.5}, {3}, dtype);
    gm.attach({w, b});
  }
  // A loss whose gradients differ per element and step; `bad` puts an inf
  // into b's gradient only.
  mg::Tensor loss(int step, bool bad) const {
    const mg::Tensor x = mg::tensor(Vec{0.3 + step, -1.7, 0.9, 2.2, -0.4, 1.1 * step}, {2, 3}, w.dtype());
    mg::Tensor y = mg::F::sum(w * x) + mg::F::sum(b * mg::tensor(Vec{0.7, -0.2, 0.05 * step}, {3}, w.dtype()));
    if (bad) y = y + mg::F::sum(b * mg::full({3}, kInf, w.dtype()));
    return y;
  }
  std::vector<mg::Tensor> params() const { return {w, b}; }
};

using Factory = std::function<std::unique_ptr<mg::optim::Optimizer>(std::vector<mg::Tensor>, bool master)>;

std::vector<std::pair<const char*, Factory>> optimizers() {
  return {
      {"SGD",
       [](std::vector<mg::Tensor> p, bool m) {
         return std::make_unique<mg::optim::SGD>(
             std::move(p), mg::optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .master_weights = m});
       }},
      {"Adam",
       [](std::vector<mg::Tensor> p, bool m) {
         return std::make_unique<mg::optim::Adam>(std::move(p),
                                                  mg::optim::AdamOptions{.lr = 0.01, .master_weights = m});
       }},
      {"AdamW",
       [](std::vector<mg::Tensor> p, bool m) {
         return std::make_unique<mg::optim::AdamW>(std::move(p),
                                                   mg::optim::AdamWOptions{.lr = 0.01, .master_weights = m});
       }},
  };
}

void scaled_backward(mg::amp::GradScaler& scaler, Model& m, int step, bool bad = false) {
  auto rec = m.gm.record();
  scaler.backward(m.gm, m.loss(step, bad), mg::Tensor(),
      {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
}

void check_close(const Vec& got, const Vec& want, double tol) {
  BOOST_TEST_REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) BOOST_TEST(got[i] == want[i], boost::test_tools::tolerance(tol));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fused_unscale)

// The separate path (unscale pass, then the step) and the fused one
// (opt.step(scaler)) over several steps, one of them overflowing.
BOOST_AUTO_TEST_CASE(fused_step_matches_the_separate_unscale_and_skips_overflow) {
  struct Setting {
    DType dtype;
    bool master;
    double tol;
  };
  // float32: the same float products, so equal to float rounding; 16-bit
  // gradients: the separate pass rounds the unscaled gradient to 16 bits,
  // the fused one does not.
  for (const Setting st : {Setting{DType::float32, false, 1e-6}, Setting{DType::bfloat16, true, 2e-2},
                           Setting{DType::float16, true, 4e-3}}) {
    for (const auto& [name, make] : optimizers()) {
      BOOST_TEST_CONTEXT(name << ", " << mg::to_string(st.dtype)) {
        Model a(st.dtype), f(st.dtype);
        auto opt_a = make(a.params(), st.master);
        auto opt_f = make(f.params(), st.master);
        mg::amp::GradScaler sa({.init_scale = 3000.0, .growth_interval = 2});
        mg::amp::GradScaler sf({.init_scale = 3000.0, .growth_interval = 2});
        for (int step = 1; step <= 6; ++step) {
          const bool bad = step == 3;
          scaled_backward(sa, a, step, bad);
          scaled_backward(sf, f, step, bad);
          const Vec fw_before = values(f.w);
          sa.unscale(a.params());
          sa.step(*opt_a);
          opt_f->step(sf);
          if (bad) {  // skipped: neither parameter moved, w's gradient was finite
            BOOST_TEST(values(f.w) == fw_before, boost::test_tools::per_element());
            BOOST_TEST(sf.found_non_finite());
          }
          sa.update();
          sf.update();
          BOOST_TEST(sf.scale_factor() == sa.scale_factor());
          opt_a->clear_grad();
          opt_f->clear_grad();
        }
        BOOST_TEST(opt_f->step_count(0) == 5);
        BOOST_TEST(opt_f->step_count(1) == 5);
        check_close(values(f.w), values(a.w), st.tol);
        check_close(values(f.b), values(a.b), st.tol);
        if (st.master) {
          check_close(values(opt_f->master_weight(0)), values(opt_a->master_weight(0)), st.tol);
          BOOST_TEST(values(f.w) == values(opt_f->master_weight(0).to(st.dtype)), boost::test_tools::per_element());
        }
      }
    }
  }
}

// Powers of two unscale exactly, so the fused and separate steps of a float32
// model agree bit for bit.
BOOST_AUTO_TEST_CASE(fused_step_is_bit_exact_for_a_power_of_two_scale) {
  Model a(DType::float32), f(DType::float32);
  mg::optim::SGD opt_a(a.params(), {.lr = 0.05, .momentum = 0.9});
  mg::optim::SGD opt_f(f.params(), {.lr = 0.05, .momentum = 0.9});
  mg::amp::GradScaler sa({.init_scale = 1024.0}), sf({.init_scale = 1024.0});
  for (int step = 1; step <= 4; ++step) {
    scaled_backward(sa, a, step);
    scaled_backward(sf, f, step);
    sa.unscale(a.params()).step(opt_a);
    opt_f.step(sf);
    sa.update();
    sf.update();
    opt_a.clear_grad();
    opt_f.clear_grad();
  }
  BOOST_TEST(values(f.w) == values(a.w), boost::test_tools::per_element());
  BOOST_TEST(values(f.b) == values(a.b), boost::test_tools::per_element());
}

// scaler.step(opt) fuses for an optimizer built with
// step_supports_amp_scaling: the gradients are read, never written, so they
// stay scaled; a default optimizer gets them unscaled in place as before.
// Upstream: PyTorch test_cuda.py / test_torch.py test_grad_scaler_pass_itself (_step_supports_amp_scaling).
BOOST_AUTO_TEST_CASE(scaler_step_fuses_only_for_optimizers_that_ask) {
  for (bool fused : {false, true}) {
    BOOST_TEST_CONTEXT("step_supports_amp_scaling " << fused) {
      Model m(DType::float32);
      mg::optim::SGD opt(m.params(), {.lr = 0.5, .step_supports_amp_scaling = fused});
      mg::amp::GradScaler scaler({.init_scale = 8.0});
      scaled_backward(scaler, m, 1);
      const Vec scaled = values(m.w.grad());
      const Vec w0 = values(m.w);
      scaler.step(opt);
      const Vec unscaled = [&] {
        Vec v = scaled;
        for (double& x : v) x /= 8.0;
        return v;
      }();
      BOOST_TEST(values(m.w.grad()) == (fused ? scaled : unscaled), boost::test_tools::per_element());
      Vec want = w0;
      for (size_t i = 0; i < want.size(); ++i) want[i] -= 0.5 * unscaled[i];
      check_close(values(m.w), want, 1e-6);
      BOOST_TEST(opt.step_count(0) == 1);
      if (fused) {
        // Still scaled in memory: a plain step must not use them (and
        // changes nothing); an unscale now unscales them, once.
        BOOST_CHECK_THROW(opt.step(), mg::StateError);
        check_close(values(m.w), want, 1e-6);
        BOOST_TEST(opt.step_count(0) == 1);
        scaler.unscale(m.params());
        BOOST_TEST(values(m.w.grad()) == unscaled, boost::test_tools::per_element());
        BOOST_CHECK_THROW(scaler.unscale(m.params()), mg::StateError);
      }
      // scaler.step(opt) again steps again, on the unscaled values (as the
      // unfused path always did).
      scaler.step(opt);
      for (size_t i = 0; i < want.size(); ++i) want[i] -= 0.5 * unscaled[i];
      check_close(values(m.w), want, 1e-6);
      BOOST_TEST(opt.step_count(0) == 2);
    }
  }
}

// A gradient the optimizer refuses makes opt.step(scaler) throw before the
// flag pass: the scaler, the gradients and the parameters are unchanged.
BOOST_AUTO_TEST_CASE(a_refused_step_changes_nothing) {
  Model m(DType::float32), other(DType::float32);
  std::vector<mg::Tensor> params = m.params();
  params.push_back(other.w);
  mg::optim::SGD opt(params, {.lr = 0.5});
  mg::amp::GradScaler scaler({.init_scale = 8.0}), another({.init_scale = 4.0});
  scaled_backward(scaler, m, 1, /*bad=*/true);
  scaled_backward(another, other, 1);  // scaled by another scaler: refused
  const Vec w0 = values(m.w), g0 = values(m.w.grad());
  BOOST_CHECK_THROW(opt.step(scaler), mg::StateError);
  BOOST_TEST(!scaler.found_non_finite());  // the overflow was not even looked at
  BOOST_TEST(values(m.w) == w0, boost::test_tools::per_element());
  BOOST_TEST(values(m.w.grad()) == g0, boost::test_tools::per_element());
  other.w.set_grad(mg::Tensor());
  opt.step(scaler);  // now it runs, finds the inf and skips
  BOOST_TEST(scaler.found_non_finite());
  BOOST_TEST(values(m.w) == w0, boost::test_tools::per_element());
  BOOST_TEST(opt.step_count(0) == 0);
}

// Gradients unscaled before the step keep their values; only the still
// scaled ones are unscaled in the update, and all share the step's flag.
BOOST_AUTO_TEST_CASE(partly_unscaled_gradients_are_not_unscaled_twice) {
  Model a(DType::float32), f(DType::float32);
  mg::optim::Adam opt_a(a.params(), {.lr = 0.01});
  mg::optim::Adam opt_f(f.params(), {.lr = 0.01});
  mg::amp::GradScaler sa({.init_scale = 256.0}), sf({.init_scale = 256.0});
  scaled_backward(sa, a, 2);
  scaled_backward(sf, f, 2);
  sa.unscale(a.params()).step(opt_a);
  sf.unscale({f.w});  // b is left to the fused update
  opt_f.step(sf);
  BOOST_TEST(values(f.w) == values(a.w), boost::test_tools::per_element());
  BOOST_TEST(values(f.b) == values(a.b), boost::test_tools::per_element());
}

// A disabled scaler passes through: opt.step(scaler) is opt.step().
BOOST_AUTO_TEST_CASE(a_disabled_scaler_just_steps) {
  Model m(DType::float32);
  mg::optim::SGD opt(m.params(), {.lr = 0.5});
  mg::amp::GradScaler scaler({.enabled = false});
  scaled_backward(scaler, m, 1);
  const Vec g = values(m.w.grad());
  const Vec w0 = values(m.w);
  opt.step(scaler);
  Vec want = w0;
  for (size_t i = 0; i < want.size(); ++i) want[i] -= 0.5 * g[i];
  check_close(values(m.w), want, 1e-6);
}

// The flag pass of the fused step: reads only, flags inf / NaN in every
// dtype and a product g * inv_scale that overflows float (the value the
// update would use), never clears a set flag.
BOOST_AUTO_TEST_CASE(non_finite_check_reads_only_and_flags_what_the_update_would_see) {
  const auto flag = [] { return mg::zeros(mg::Shape{}, DType::float32); };
  const auto check = [](std::vector<mg::Tensor> ts, const mg::Tensor& found, double inv) {
    mg::backend::non_finite_check(ts, found, mg::scalar(inv, DType::float64));
    return found.item<float>() != 0.0f;
  };
  for (DType dt : {DType::float32, DType::float64, DType::bfloat16, DType::float16}) {
    BOOST_TEST_CONTEXT(mg::to_string(dt)) {
      // A long clean tensor (several blocks and threads' shares) and a short one.
      const mg::Tensor clean = mg::full({3000}, 1.5, dt);
      const mg::Tensor small = mg::tensor(Vec{0.25, -2.0, 3.0}, {3}, dt);
      mg::Tensor found = flag();
      BOOST_TEST(!check({clean, small}, found, 0.5));
      BOOST_TEST(values(small) == (Vec{0.25, -2.0, 3.0}), boost::test_tools::per_element());  // not unscaled
      for (double bad : {kInf, -kInf, std::nan("")}) {
        mg::Tensor t = mg::full({2000}, 1.0, dt);
        mg::Tensor with_bad = mg::F::concat({t, mg::full({1}, bad, dt)}, 0);
        BOOST_TEST(check({clean, with_bad}, found = flag(), 0.5));
      }
      BOOST_TEST(check({clean}, found, 1.0));  // a set flag stays set
    }
  }
  // 1e30 and 2^126 are finite, their product is not in float: the fused
  // update would compute inf, so the step must be skipped.
  mg::Tensor found = flag();
  BOOST_TEST(check({mg::full({4}, 1e30, DType::float32)}, found, 0x1p126));
  // A transposed (strided) view is read through its strides.
  const mg::Tensor clean2 = mg::tensor(Vec{1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {2, 3}, DType::bfloat16);
  BOOST_TEST(!check({mg::F::transpose(clean2, 0, 1)}, found = flag(), 1.0));
  const mg::Tensor bad2 = mg::tensor(Vec{1.0, 2.0, 3.0, kInf, 5.0, 6.0}, {2, 3}, DType::bfloat16);
  BOOST_TEST(check({mg::F::transpose(bad2, 0, 1)}, found = flag(), 1.0));
}

BOOST_AUTO_TEST_SUITE_END()
