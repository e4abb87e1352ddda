// GradManager cases ported from MegEngine's
// imperative/python/test/unit/autodiff/test_grad_manager.py (and its older
// copy test_grad_manger.py) that no other suite here follows already. Each
// case names the upstream test; the expected values are upstream's.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace F = mixgrad::F;
using mg::DType;
using mg::autodiff::GradManager;
namespace tt = boost::test_tools;

namespace {

std::vector<double> values(const mg::Tensor& t) { return t.to(DType::float64).to_vector<double>(); }

// MegEngine's x, w, b of test_basic and test_dy.
struct Affine {
  mg::Tensor x = F::reshape(mg::tensor({1.f, 3.f, 5.f}, {3}), {1, 3});
  mg::Tensor w = F::reshape(mg::tensor({2.f, 4.f, 6.f}, {3}), {3, 1});
  mg::Tensor b = mg::full({}, -1.0);
  mg::Tensor y() const { return F::add(F::matmul(x, w), b); }
};

const std::vector<float> kX = {0.1f, 0.5f, 0.9f, 1.7f};
mg::Tensor x_tensor() { return mg::tensor(std::vector<float>(kX), {static_cast<int64_t>(kX.size())}); }

// MegEngine's MySin of test_2nd_grad_with_custom_gradient: forward on a
// detached copy of x, backward cos(x) * dy.
struct MySin : mg::autodiff::Function {
  mg::Tensor inp;
  std::string name() const override { return "MySin"; }
  std::vector<mg::Tensor> forward(const std::vector<mg::Tensor>& in) override {
    inp = in[0];
    return {F::sin(F::detach(in[0]))};
  }
  std::vector<mg::Tensor> backward(const std::vector<mg::Tensor>& dy) override { return {F::mul(F::cos(inp), dy[0])}; }
};

// MegEngine's MyCos: backward -MySin()(x) * dy, itself a custom function, so
// the second derivative goes through MySin's backward.
struct MyCos : mg::autodiff::Function {
  mg::Tensor inp;
  std::string name() const override { return "MyCos"; }
  std::vector<mg::Tensor> forward(const std::vector<mg::Tensor>& in) override {
    inp = in[0];
    return {F::cos(F::detach(in[0]))};
  }
  std::vector<mg::Tensor> backward(const std::vector<mg::Tensor>& dy) override {
    if (!dy[0].defined()) return {mg::Tensor()};
    return {F::mul(F::neg(mg::autodiff::apply(std::make_shared<MySin>(), {inp})[0]), dy[0])};
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(upstream_grad_manager)

// MegEngine test_basic: y = x @ w + b; w.grad = x^T = [[1], [3], [5]], b.grad
// = 1, with record() / release() and again with a recording scope.
BOOST_AUTO_TEST_CASE(megengine_test_basic) {
  Affine a;
  GradManager gm;
  gm.attach({a.w, a.b});
  // MegEngine's bare gm.record(): here the returned scope must be held (a
  // discarded one ends the recording at once; record() is [[nodiscard]]).
  auto recording = gm.record();
  gm.backward(a.y());
  gm.release();  // not necessary; the scope's end after it is a no-op
  BOOST_TEST(a.w.grad().shape() == mg::Shape({3, 1}));
  BOOST_TEST(values(a.w.grad()) == std::vector<double>({1, 3, 5}), tt::per_element());
  BOOST_TEST(values(a.b.grad()) == std::vector<double>({1}), tt::per_element());

  a.w.set_grad({});
  a.b.set_grad({});
  {
    auto rec = gm.record();
    gm.backward(a.y());
  }
  BOOST_TEST(values(a.w.grad()) == std::vector<double>({1, 3, 5}), tt::per_element());
  BOOST_TEST(values(a.b.grad()) == std::vector<double>({1}), tt::per_element());
}

// MegEngine test_dy: dy = 2.5 of y's shape [1, 1] multiplies both gradients.
BOOST_AUTO_TEST_CASE(megengine_test_dy) {
  Affine a;
  GradManager gm;
  gm.attach({a.w, a.b});
  {
    auto rec = gm.record();
    gm.backward(a.y(), F::reshape(mg::full({}, 2.5), {1, 1}));
  }
  BOOST_TEST(values(a.w.grad()) == std::vector<double>({2.5, 7.5, 12.5}), tt::per_element());
  BOOST_TEST(values(a.b.grad()) == std::vector<double>({2.5}), tt::per_element());
}

// MegEngine test_regression_1762: a conv, then a batch norm in training mode
// whose output is unused, then the loss from the conv output alone. The
// backward works; the conv bias gets N * H * W = 90 per channel, the batch
// norm's weight and bias (off the loss's path) no gradient. Upstream's
// weight / bias are [1, 10, 1, 1]; mixgrad's batch_norm takes [C].
BOOST_AUTO_TEST_CASE(megengine_test_regression_1762) {
  const mg::Tensor x = mg::ones({10, 10, 3, 3});
  mg::nn::Conv2d conv(10, 10, 3, {.padding = 1});
  mg::Tensor weight = mg::ones({10}), bias = mg::zeros({10});
  GradManager gm;
  gm.attach(conv.parameters()).attach({weight, bias});
  {
    auto rec = gm.record();
    mg::Tensor out1 = conv(x);
    mg::Tensor out2 = F::batch_norm(out1, mg::Tensor(), mg::Tensor(), weight, bias, {.training = true});
    mg::Tensor loss = F::add(out1, 1.0);
    BOOST_CHECK_NO_THROW(gm.backward(loss));
  }
  BOOST_TEST_REQUIRE(conv.bias().grad().defined());
  for (double v : values(conv.bias().grad())) BOOST_TEST(v == 90.0);
  BOOST_TEST(!weight.grad().defined());
  BOOST_TEST(!bias.grad().defined());
}

// MegEngine test_empty_grad_in_backward: where(x > 0.7, x, y) with x = 0.5
// everywhere picks y: x.grad is all 0 (defined), y.grad all 1.
BOOST_AUTO_TEST_CASE(megengine_test_empty_grad_in_backward) {
  mg::Tensor x = mg::full({100}, 0.5), y = mg::ones({100});
  GradManager gm;
  gm.attach({x, y});
  {
    auto rec = gm.record();
    mg::Tensor z = F::where(F::gt(x, 0.7), x, y);
    gm.backward(F::sum(z));
  }
  BOOST_TEST_REQUIRE(x.grad().defined());
  for (double v : values(x.grad())) BOOST_TEST(v == 0.0);
  for (double v : values(y.grad())) BOOST_TEST(v == 1.0);
}

// MegEngine test_attach_invalid_tensor_dtype (uint8, int8, int32) and
// test_attach_differentible_tensor_dtype (float32, float16): only floating
// tensors attach; the others are a DTypeError (upstream: AssertionError).
BOOST_AUTO_TEST_CASE(megengine_test_attach_tensor_dtypes) {
  for (DType dt : {DType::uint8, DType::int8, DType::int32}) {
    GradManager gm;
    BOOST_CHECK_THROW(gm.attach(mg::ones({1}, dt)), mg::DTypeError);
    BOOST_TEST(gm.attached_tensors().empty());
  }
  for (DType dt : {DType::float32, DType::float16}) {
    GradManager gm;
    const mg::Tensor x = mg::ones({1}, dt);  // held: attach keeps tensors weakly
    BOOST_CHECK_NO_THROW(gm.attach(x));
    BOOST_TEST(gm.attached_tensors().size() == 1u);
  }
}

// MegEngine test_attach_temporary: a tensor attached with a callback inside
// each recording gets the callback (with itself and its gradient, here w =
// 2) and is not kept alive by the manager afterwards.
BOOST_AUTO_TEST_CASE(megengine_test_attach_temporary) {
  mg::Tensor w = mg::full({}, 2.0);
  GradManager gm;
  gm.attach(w);
  for (int i = 0; i < 3; ++i) {
    bool called = false;
    {
      mg::Tensor x = mg::full({}, static_cast<double>(i));
      {
        auto rec = gm.record();
        gm.attach(x, {[&called, id = x.id()](const mg::Tensor& t, const mg::Tensor& g) {
                     BOOST_TEST(t.id() == id);
                     BOOST_TEST(values(g) == std::vector<double>({2.0}), tt::per_element());
                     called = true;
                     return g;
                   }});
        gm.backward(F::mul(x, w));
      }
      BOOST_TEST(called);
    }
    // x is gone: the manager holds attached tensors weakly.
    BOOST_TEST(gm.attached_tensors().size() == 1u);
  }
}

// MegEngine test_2nd_grad_with_custom_gradient: MyCos's backward calls MySin,
// both custom functions; nested managers give the first derivative -sin(x),
// then the outer one adds d(sum -sin x)/dx = -cos(x).
BOOST_AUTO_TEST_CASE(megengine_test_2nd_grad_with_custom_gradient) {
  mg::Tensor x = x_tensor();
  GradManager gm, gm2;
  gm.attach(x);
  gm2.attach(x);
  {
    auto outer = gm.record();
    {
      auto inner = gm2.record();
      mg::Tensor y = mg::autodiff::apply(std::make_shared<MyCos>(), {x})[0];
      gm2.backward(y);
    }
    std::vector<double> first;
    for (float v : kX) first.push_back(-std::sin(v));
    BOOST_TEST(values(x.grad()) == first, tt::tolerance(1e-5) << tt::per_element());
    gm.backward(x.grad());
  }
  std::vector<double> expect;
  for (float v : kX) expect.push_back(-std::sin(v) - std::cos(v));
  BOOST_TEST(values(x.grad()) == expect, tt::tolerance(1e-5) << tt::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
