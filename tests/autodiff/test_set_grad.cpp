// Tensor::set_grad checks what backward will accumulate into: shape, dtype,
// device and layout. A wrong gradient is a typed error that names the call and
// the shapes, and changes nothing; backward checks again before it touches
// any gradient, so no path reads or writes past a gradient's memory.
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "../common/test_util.hpp"

namespace mg = mixgrad;
using mg::autodiff::GradManager;
namespace tt = boost::test_tools;

namespace {

using test_util::check_error;

mg::Tensor vec(std::initializer_list<float> v) { return mg::tensor(v, {static_cast<int64_t>(v.size())}); }
std::vector<float> values(const mg::Tensor& t) { return t.to_vector<float>(); }

}  // namespace

BOOST_AUTO_TEST_SUITE(set_grad)

BOOST_AUTO_TEST_CASE(a_gradient_of_another_shape_is_rejected) {
  auto w = mg::zeros({10});
  const auto kept = mg::full({10}, 2.0);
  w.set_grad(kept);
  // A [64] gradient on a [10] tensor: backward used to accumulate 10 of 64... or read 64 of 10.
  check_error<mg::ShapeError>([&] { w.set_grad(mg::ones({64})); }, {"Tensor::set_grad", "float32[64]", "float32[10]"});
  check_error<mg::ShapeError>([&] { w.set_grad(mg::ones({10, 1})); }, {"Tensor::set_grad", "float32[10, 1]"});
  check_error<mg::ShapeError>([&] { w.set_grad(mg::scalar(1.0)); }, {"Tensor::set_grad", "float32[]"});
  BOOST_TEST(w.grad().id() == kept.id());  // unchanged
}

BOOST_AUTO_TEST_CASE(an_overlapping_view_is_rejected) {
  auto w = mg::zeros({10});
  auto base = mg::ones({1});
  // Stride 0: accumulating into it would add all 10 gradients to base's one element.
  check_error<mg::ShapeError>([&] { w.set_grad(mg::F::broadcast_to(base, {10})); },
                              {"Tensor::set_grad", "float32[10]", "strides [0]", "overlap"});
  auto m = mg::zeros({3, 4});
  check_error<mg::ShapeError>([&] { m.set_grad(mg::F::broadcast_to(mg::ones({1, 4}), {3, 4})); },
                              {"Tensor::set_grad", "float32[3, 4]"});
  BOOST_TEST(!w.grad().defined());
  BOOST_TEST(!m.grad().defined());
  BOOST_TEST(base.item<float>() == 1.f);
}

BOOST_AUTO_TEST_CASE(non_overlapping_strided_views_are_accepted_and_accumulated_into) {
  auto w = vec({1, 2, 3, 4, 5, 6}).reshape({3, 2});
  auto base = mg::zeros({2, 3});
  w.set_grad(mg::F::transpose(base, 0, 1));  // a permutation: no two elements share memory
  auto big = mg::zeros({4, 4});
  auto v = mg::zeros({2, 2});
  v.set_grad(big.narrow(0, 1, 2).narrow(1, 2, 2));  // a window with gaps between rows
  auto s = mg::zeros({1, 3});
  s.set_grad(mg::F::broadcast_to(mg::zeros({3}), {1, 3}));  // stride 0 on an extent-1 dim: no overlap

  GradManager gm;
  gm.attach({w, v});
  {
    auto r = gm.record();
    gm.backward(mg::F::add(mg::F::sum(mg::F::mul(w, 2.0)), mg::F::sum(v)));
  }
  BOOST_TEST(values(base) == std::vector<float>(6, 2.f), tt::per_element());  // accumulated in place
  const std::vector<float> b = values(big);
  for (int i = 0; i < 16; ++i) {
    const bool in_window = (i / 4 == 1 || i / 4 == 2) && i % 4 >= 2;
    BOOST_TEST(b[i] == (in_window ? 1.f : 0.f), "element " << i);
  }
}

BOOST_AUTO_TEST_CASE(dtypes_follow_the_floating_policy) {
  auto w = mg::zeros({2});
  check_error<mg::DTypeError>([&] { w.set_grad(mg::arange(2)); }, {"Tensor::set_grad", "int64[2]", "floating"});
  check_error<mg::DTypeError>([&] { mg::arange(2).set_grad(mg::zeros({2})); }, {"Tensor::set_grad", "int64[2]"});
  BOOST_TEST(!w.grad().defined());
  // Any floating dtype is accepted (optimizers read it); backward accumulates into it.
  w.set_grad(mg::full({2}, 0.5, mg::DType::float64));
  GradManager gm;
  gm.attach(w);
  {
    auto r = gm.record();
    gm.backward(mg::F::sum(mg::F::mul(w, 3.0)));
  }
  BOOST_TEST(w.grad().dtype() == mg::DType::float64);
  BOOST_TEST(w.grad().to_vector<double>() == std::vector<double>({3.5, 3.5}), tt::per_element());
  w.set_grad(mg::Tensor());  // clearing is always allowed
  BOOST_TEST(!w.grad().defined());
}

BOOST_AUTO_TEST_CASE(an_undefined_tensor_has_no_gradient_to_set) {
  check_error<mg::StateError>([] { mg::Tensor().set_grad(mg::zeros({1})); }, {"Tensor::set_grad", "undefined"});
}

BOOST_AUTO_TEST_CASE(backward_checks_a_gradient_planted_past_set_grad) {
  // TensorImpl is reachable: backward must not trust .grad blindly either.
  auto a = vec({1, 2}), b = vec({3, 4});
  a.set_grad(vec({10, 20}));
  b.impl()->grad = mg::ones({64});
  GradManager gm;
  gm.attach({a, b});
  auto r = gm.record();
  check_error<mg::ShapeError>([&] { gm.backward(mg::F::sum(mg::F::mul(a, b))); },
                              {"GradManager::backward", "float32[64]", "float32[2]"});
  BOOST_TEST(values(a.grad()) == std::vector<float>({10, 20}), tt::per_element());  // no partial update
  BOOST_TEST(b.grad().numel() == 64);
}

BOOST_AUTO_TEST_CASE(backward_rejects_a_planted_broadcast_gradient) {
  auto w = vec({1, 2, 3});
  auto base = mg::zeros({1});
  w.impl()->grad = mg::F::broadcast_to(base, {3});
  GradManager gm;
  gm.attach(w);
  auto r = gm.record();
  check_error<mg::ShapeError>([&] { gm.backward(mg::F::sum(w)); }, {"GradManager::backward", "overlap"});
  BOOST_TEST(base.item<float>() == 0.f);
}

BOOST_AUTO_TEST_SUITE_END()
