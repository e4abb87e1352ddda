// SGD against a reference written out here element by element in double.
#include <boost/test/unit_test.hpp>

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

// Independent reference of one SGD parameter over a sequence of gradients.
struct RefSgd {
  RefSgd(double lr_, double momentum_ = 0, double dampening_ = 0, double wd_ = 0, bool nesterov_ = false)
      : lr(lr_), momentum(momentum_), dampening(dampening_), wd(wd_), nesterov(nesterov_) {}
  double lr, momentum, dampening, wd;
  bool nesterov;
  Vec buf;
  bool first = true;
  void step(Vec& p, const Vec& g_in) {
    if (buf.empty()) buf.assign(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = g_in[i] + wd * p[i];
      if (momentum != 0) {
        buf[i] = first ? g : momentum * buf[i] + (1 - dampening) * g;
        g = nesterov ? g + momentum * buf[i] : buf[i];
      }
      p[i] -= lr * g;
    }
    first = false;
  }
};

const std::vector<Vec> kGrads = {{0.5, -1.0, 2.0, 0.25}, {-0.3, 0.7, 1.5, -2.0}, {1.0, 1.0, -0.5, 0.125}};
const Vec kInit = {1.0, -2.0, 0.5, 3.0};

void check_close(const mg::Tensor& t, const Vec& want, double tol) {
  const auto got = t.to_vector<double>();
  BOOST_REQUIRE_EQUAL(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) BOOST_TEST(std::abs(got[i] - want[i]) <= tol, i << ": " << got[i] << " vs " << want[i]);
}

void run_case(const mg::optim::SGDOptions& o, mg::DType dt, double tol) {
  auto p = make(kInit, dt);
  mg::optim::SGD opt({p}, o);
  RefSgd ref{o.lr, o.momentum, o.dampening, o.weight_decay, o.nesterov};
  Vec want = kInit;
  for (const Vec& g : kGrads) {
    p.set_grad(make(g, dt));
    opt.step().clear_grad();
    ref.step(want, g);
    check_close(p, want, tol);
  }
  BOOST_TEST(opt.step_count(0) == 3);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(sgd)

BOOST_AUTO_TEST_CASE(plain_momentum_nesterov_dampening_weight_decay) {
  run_case({.lr = 0.1}, mg::DType::float32, 1e-6);
  run_case({.lr = 0.1, .momentum = 0.9}, mg::DType::float32, 1e-6);
  run_case({.lr = 0.05, .momentum = 0.9, .nesterov = true}, mg::DType::float32, 1e-6);
  run_case({.lr = 0.1, .momentum = 0.8, .dampening = 0.3}, mg::DType::float32, 1e-6);
  run_case({.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01}, mg::DType::float32, 1e-6);
  run_case({.lr = 0.1, .weight_decay = 0.1}, mg::DType::float32, 1e-6);
  run_case({.lr = 0.05, .momentum = 0.9, .weight_decay = 0.05, .nesterov = true}, mg::DType::float64, 1e-13);
}

BOOST_AUTO_TEST_CASE(first_step_by_hand) {
  // p = 1, g = 0.5, lr 0.1, momentum 0.9: buf = 0.5, p = 1 - 0.05 = 0.95;
  // second step g = 0.5: buf = 0.45 + 0.5 = 0.95, p = 0.95 - 0.095 = 0.855.
  auto p = make({1.0});
  mg::optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
  p.set_grad(make({0.5}));
  opt.step();
  BOOST_TEST(p.item<float>() == 0.95f, boost::test_tools::tolerance(1e-6f));
  opt.step();  // the gradient was not cleared: used again
  BOOST_TEST(p.item<float>() == 0.855f, boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(low_precision_parameters_update_in_float) {
  // float16 / bfloat16 parameters: the update is computed in float and
  // rounded once; the momentum buffer stays in float32, so the result is the
  // float reference rounded (within one rounding of the storage type).
  for (auto dt : {mg::DType::float16, mg::DType::bfloat16}) {
    auto p = make(kInit, dt);
    mg::optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9});
    RefSgd ref{0.1, 0.9};
    Vec want = kInit;
    for (const Vec& g : kGrads) {
      p.set_grad(make(g, dt));
      opt.step().clear_grad();
      ref.step(want, g);
      // Round the reference the way the parameter storage does each step.
      want = make(want, dt).to_vector<double>();
    }
    check_close(p, want, dt == mg::DType::float16 ? 4e-3 : 3e-2);
    const auto sd = opt.state_dict();
    BOOST_TEST(sd.at("state.0.momentum_buffer").dtype() == mg::DType::float32);
  }
  // A float32 parameter with a bfloat16 gradient: widened on the fly.
  auto p = make(kInit);
  mg::optim::SGD opt({p}, {.lr = 0.5});
  p.set_grad(make({0.5, -1.0, 2.0, 0.25}, mg::DType::bfloat16));  // exact in bfloat16
  opt.step();
  check_close(p, {0.75, -1.5, -0.5, 2.875}, 0.0);
}

BOOST_AUTO_TEST_CASE(parameters_without_grad_are_skipped) {
  auto a = make({1.0, 2.0});
  auto b = make({3.0, 4.0});
  mg::optim::SGD opt({a, b}, {.lr = 0.1, .momentum = 0.9});
  a.set_grad(make({1.0, 1.0}));
  const uint64_t va = a.version(), vb = b.version();
  opt.step();
  BOOST_TEST(b.to_vector<double>() == Vec({3.0, 4.0}), boost::test_tools::per_element());
  BOOST_TEST(a.version() > va);  // written in place: autocast's cast cache must see it
  BOOST_TEST(b.version() == vb);
  BOOST_TEST(opt.step_count(0) == 1);
  BOOST_TEST(opt.step_count(1) == 0);
  BOOST_TEST(!opt.state_dict().contains("state.1.momentum_buffer"));
  // b's first update initialises its buffer from its gradient (no momentum
  // from a's steps leaks in): b = 3 - 0.1 * 2.
  opt.clear_grad();
  BOOST_TEST(!a.grad().defined());
  b.set_grad(make({2.0, 2.0}));
  opt.step();
  BOOST_TEST(b.at<float>({0}) == 2.8f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(a.to_vector<double>()[0] == 0.9, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(opt.step_count(0) == 1);
  BOOST_TEST(opt.step_count(1) == 1);
}

BOOST_AUTO_TEST_CASE(large_tensor_uses_the_parallel_path) {
  const int64_t n = 200003;  // above the parallel grain, odd length
  Vec init(n), grad(n);
  for (int64_t i = 0; i < n; ++i) {
    init[i] = std::sin(0.001 * i);
    grad[i] = std::cos(0.002 * i);
  }
  auto p = make(init);
  mg::optim::SGD opt({p}, {.lr = 0.01, .momentum = 0.5, .nesterov = true});
  RefSgd ref{0.01, 0.5, 0, 0, true};
  Vec want = init;
  for (int s = 0; s < 2; ++s) {
    p.set_grad(make(grad));
    opt.step();
    ref.step(want, grad);
  }
  check_close(p, want, 1e-6);
}

BOOST_AUTO_TEST_CASE(invalid_options_throw_at_construction) {
  auto p = make({1.0});
  BOOST_CHECK_THROW(mg::optim::SGD({p}, {.lr = -0.1}), mg::ValueError);
  BOOST_CHECK_THROW(mg::optim::SGD({p}, {.lr = 0.1, .momentum = -0.5}), mg::ValueError);
  BOOST_CHECK_THROW(mg::optim::SGD({p}, {.lr = 0.1, .dampening = 1.5}), mg::ValueError);
  BOOST_CHECK_THROW(mg::optim::SGD({p}, {.lr = 0.1, .weight_decay = -1}), mg::ValueError);
  BOOST_CHECK_THROW(mg::optim::SGD({p}, {.lr = 0.1, .nesterov = true}), mg::ValueError);
  BOOST_CHECK_THROW(mg::optim::SGD({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}), mg::ValueError);
  BOOST_CHECK_THROW(mg::optim::SGD({p}, {.lr = std::nan("")}), mg::ValueError);
  BOOST_CHECK_THROW(mg::optim::SGD(std::vector<mg::Tensor>{}, {.lr = 0.1}), mg::ValueError);
  BOOST_CHECK_THROW(mg::optim::SGD({p, p}, {.lr = 0.1}), mg::ValueError);
  BOOST_CHECK_THROW(mg::optim::SGD({mg::Tensor()}, {.lr = 0.1}), mg::StateError);
  BOOST_CHECK_THROW(mg::optim::SGD({mg::arange(3)}, {.lr = 0.1}), mg::DTypeError);
}

BOOST_AUTO_TEST_CASE(bad_gradient_changes_nothing) {
  auto a = make({1.0, 2.0});
  auto b = make({3.0, 4.0});
  mg::optim::SGD opt({a, b}, {.lr = 0.1, .momentum = 0.9});
  a.set_grad(make({1.0, 1.0}));
  // Tensor::set_grad refuses these gradients; planted past it, step() must refuse them too.
  BOOST_CHECK_THROW(b.set_grad(make({1.0, 1.0, 1.0})), mg::ShapeError);
  b.impl()->grad = make({1.0, 1.0, 1.0});  // wrong shape
  BOOST_CHECK_THROW(opt.step(), mg::ShapeError);
  BOOST_TEST(a.to_vector<double>() == Vec({1.0, 2.0}), boost::test_tools::per_element());
  BOOST_TEST(opt.step_count(0) == 0);
  BOOST_CHECK_THROW(b.set_grad(mg::arange(2)), mg::DTypeError);
  b.impl()->grad = mg::arange(2);  // int64 gradient
  BOOST_CHECK_THROW(opt.step(), mg::DTypeError);
  BOOST_TEST(opt.step_count(0) == 0);
}

BOOST_AUTO_TEST_CASE(set_lr_changes_the_step) {
  auto p = make({1.0});
  mg::optim::SGD opt({p}, {.lr = 0.1});
  BOOST_TEST(opt.lr() == 0.1);
  opt.set_lr(0.5);
  BOOST_TEST(opt.lr() == 0.5);
  BOOST_TEST(opt.options().lr == 0.5);
  p.set_grad(make({1.0}));
  opt.step();
  BOOST_TEST(p.item<float>() == 0.5f);
  BOOST_CHECK_THROW(opt.set_lr(-1.0), mg::ValueError);
  BOOST_TEST(opt.lr() == 0.5);
}

BOOST_AUTO_TEST_SUITE_END()
