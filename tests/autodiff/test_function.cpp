// Custom functions (autodiff::Function / apply): their gradient against
// finite differences, their place on the tape among built-in ops, the
// autocast rules of PyTorch's custom_fwd / custom_bwd, the checks on what
// backward returns; and MegEngine's rule that a gradient callback returning
// nothing leaves the tensor's .grad() alone.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autodiff/inspect.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace F = mg::F;
using mg::DType;
using mg::autodiff::GradManager;
namespace tt = boost::test_tools;

namespace {

mg::Tensor vec(std::initializer_list<float> v) { return mg::tensor(v, {static_cast<int64_t>(v.size())}); }
std::vector<float> values(const mg::Tensor& t) { return F::astype(t, DType::float32).to_vector<float>(); }

template <class E, class Fn>
std::string message_of(Fn&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    BOOST_ERROR(std::string("wrong exception type: ") + e.what());
    return "";
  }
  BOOST_ERROR("no exception");
  return "";
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// y = tanh(x) * w, with a hand-written backward.
struct TanhMul : mg::autodiff::Function {
  mg::Tensor t, w;
  int backward_calls = 0;
  std::string name() const override { return "TanhMul"; }
  std::vector<mg::Tensor> forward(const std::vector<mg::Tensor>& in) override {
    t = F::tanh(in[0]);
    w = in[1];
    return {F::mul(t, w)};
  }
  std::vector<mg::Tensor> backward(const std::vector<mg::Tensor>& dy) override {
    ++backward_calls;
    const auto one_minus_t2 = F::sub(mg::ones_like(t), F::mul(t, t));
    return {F::mul(F::mul(dy[0], w), one_minus_t2), F::mul(dy[0], t)};
  }
};

// y = exp(x), saving its result (PyTorch's documentation example).
struct Exp : mg::autodiff::Function {
  mg::Tensor result;
  std::string name() const override { return "Exp"; }
  std::vector<mg::Tensor> forward(const std::vector<mg::Tensor>& in) override {
    result = F::exp(in[0]);
    return {result};
  }
  std::vector<mg::Tensor> backward(const std::vector<mg::Tensor>& dy) override { return {F::mul(dy[0], result)}; }
};

// Returns what `make` builds as the gradients, whatever comes in.
struct Rigged : mg::autodiff::Function {
  std::function<std::vector<mg::Tensor>()> make;
  std::string name() const override { return "Rigged"; }
  std::vector<mg::Tensor> forward(const std::vector<mg::Tensor>& in) override { return {F::mul(in[0], in[1])}; }
  std::vector<mg::Tensor> backward(const std::vector<mg::Tensor>&) override { return make(); }
};

// Central differences of sum(f(inputs) * dy) w.r.t. inputs[i], in float64.
std::vector<double> numeric_grad(const std::function<mg::Tensor(const std::vector<mg::Tensor>&)>& f,
                                 const std::vector<mg::Tensor>& inputs, size_t i, const mg::Tensor& dy,
                                 double eps = 1e-6) {
  std::vector<double> base = inputs[i].to_vector<double>();
  std::vector<double> out(base.size());
  auto loss_at = [&](size_t k, double v) {
    std::vector<double> moved = base;
    moved[k] = v;
    std::vector<mg::Tensor> in = inputs;
    in[i] = mg::tensor(moved, inputs[i].shape());
    return F::sum(F::mul(f(in), dy)).item<double>();
  };
  for (size_t k = 0; k < base.size(); ++k)
    out[k] = (loss_at(k, base[k] + eps) - loss_at(k, base[k] - eps)) / (2 * eps);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(custom_function)

// PyTorch's gradcheck of an autograd.Function in float64 (test_autograd.py).
BOOST_AUTO_TEST_CASE(gradient_matches_finite_differences_in_float64) {
  auto x = F::astype(mg::uniform({3, 4}, -2.0, 2.0), DType::float64);
  auto w = F::astype(mg::uniform({3, 4}, -1.0, 1.0), DType::float64);
  auto dy = F::astype(mg::uniform({3, 4}, -1.0, 1.0), DType::float64);
  auto fn = std::make_shared<TanhMul>();
  GradManager gm;
  gm.attach({x, w});
  {
    auto r = gm.record();
    auto y = mg::autodiff::apply(fn, {x, w})[0];
    BOOST_TEST(mg::autodiff::detail::tape_size(gm) == 1u);  // one op: its inner tanh and mul stay off the tape
    BOOST_TEST(y.dtype() == DType::float64);
    gm.backward(y, dy);
  }
  BOOST_TEST(fn->backward_calls == 1);
  auto forward = [](const std::vector<mg::Tensor>& in) { return F::mul(F::tanh(in[0]), in[1]); };
  const auto nx = numeric_grad(forward, {x, w}, 0, dy);
  const auto nw = numeric_grad(forward, {x, w}, 1, dy);
  BOOST_TEST(x.grad().dtype() == DType::float64);
  BOOST_TEST(x.grad().to_vector<double>() == nx, tt::tolerance(1e-6) << tt::per_element());
  BOOST_TEST(w.grad().to_vector<double>() == nw, tt::tolerance(1e-6) << tt::per_element());
}

// The function in the middle of a graph of built-in ops gives the gradients
// the same graph gets with F::exp in its place.
BOOST_AUTO_TEST_CASE(inside_a_larger_graph_matches_the_built_in_op) {
  auto x = mg::uniform({2, 3}, -1.0, 1.0);
  auto w1 = mg::uniform({3, 4}, -1.0, 1.0), w2 = mg::uniform({4, 2}, -1.0, 1.0);
  auto run = [&](bool custom) {
    w1.set_grad(mg::Tensor());
    w2.set_grad(mg::Tensor());
    GradManager gm;
    gm.attach({w1, w2});
    auto r = gm.record();
    auto h = F::matmul(x, w1);
    auto e = custom ? mg::autodiff::apply(std::make_shared<Exp>(), {h})[0] : F::exp(h);
    gm.backward(F::sum(F::mul(F::matmul(e, w2), 0.5)));
    return std::pair{values(w1.grad()), values(w2.grad())};
  };
  const auto [ref1, ref2] = run(false);
  const auto [got1, got2] = run(true);
  BOOST_TEST(got1 == ref1, tt::tolerance(1e-5f) << tt::per_element());
  BOOST_TEST(got2 == ref2, tt::tolerance(1e-5f) << tt::per_element());
}

// Several outputs: backward once per output that gets a gradient, with
// zeros in the other slots.
BOOST_AUTO_TEST_CASE(two_outputs_each_pass_their_gradient_with_zeros_for_the_other) {
  struct Twice : mg::autodiff::Function {
    std::vector<std::vector<float>> seen;  // sum of each incoming gradient, per call
    std::vector<mg::Tensor> forward(const std::vector<mg::Tensor>& in) override {
      return {F::mul(in[0], 2.0), F::mul(in[0], 3.0)};
    }
    std::vector<mg::Tensor> backward(const std::vector<mg::Tensor>& dy) override {
      seen.push_back({F::sum(dy[0]).item<float>(), F::sum(dy[1]).item<float>()});
      return {F::add(F::mul(dy[0], 2.0), F::mul(dy[1], 3.0))};
    }
  };
  auto x = vec({1, 2});
  auto fn = std::make_shared<Twice>();
  GradManager gm;
  gm.attach(x);
  {
    auto r = gm.record();
    auto out = mg::autodiff::apply(fn, {x});
    gm.backward(F::add(F::sum(out[0]), F::mul(F::sum(out[1]), 5.0)));
  }
  BOOST_TEST(values(x.grad()) == std::vector<float>({17, 17}), tt::per_element());  // 2 + 5 * 3
  BOOST_TEST(fn->seen.size() == 2u);
  BOOST_TEST(fn->seen.at(0) == std::vector<float>({0, 10}), tt::per_element());  // the later output first
  BOOST_TEST(fn->seen.at(1) == std::vector<float>({2, 0}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(an_output_that_is_an_input_is_returned_as_a_new_tensor) {
  struct Identity : mg::autodiff::Function {
    std::vector<mg::Tensor> forward(const std::vector<mg::Tensor>& in) override { return {in[0]}; }
    std::vector<mg::Tensor> backward(const std::vector<mg::Tensor>& dy) override { return {F::mul(dy[0], 4.0)}; }
  };
  auto x = vec({1, 2});
  GradManager gm;
  gm.attach(x);
  auto r = gm.record();
  auto y = mg::autodiff::apply(std::make_shared<Identity>(), {x})[0];
  BOOST_TEST(y.id() != x.id());
  gm.backward(F::sum(y));
  BOOST_TEST(values(x.grad()) == std::vector<float>({4, 4}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(nothing_is_recorded_without_a_tracked_input) {
  auto x = vec({1, 2}), w = vec({3, 4});
  GradManager gm;
  gm.attach(w);
  auto r = gm.record();
  auto y = mg::autodiff::apply(std::make_shared<Exp>(), {x})[0];
  BOOST_TEST(mg::autodiff::detail::tape_size(gm) == 0u);
  BOOST_TEST(values(y) == std::vector<float>({std::exp(1.f), std::exp(2.f)}), tt::tolerance(1e-6f) << tt::per_element());
}

// ---- autocast: PyTorch's custom_fwd / custom_bwd -------------------------

namespace {
// Records the dtypes and autocast state forward and backward run in.
struct Probe : mg::autodiff::Function {
  std::vector<DType> forward_dtypes;
  bool forward_autocast = false;
  bool backward_autocast = false;
  DType backward_low_dtype = DType::float32;
  DType out_dtype = DType::float32;
  mg::Tensor a, b;
  std::vector<mg::Tensor> forward(const std::vector<mg::Tensor>& in) override {
    for (const auto& t : in) forward_dtypes.push_back(t.dtype());
    forward_autocast = mg::amp::is_autocast_enabled();
    a = in[0];
    b = in[1].dtype() == a.dtype() ? in[1] : F::astype(in[1], a.dtype());  // float64 is never cast
    auto out = F::matmul(a, b);  // autocast would make this bfloat16
    out_dtype = out.dtype();
    return {out};
  }
  std::vector<mg::Tensor> backward(const std::vector<mg::Tensor>& dy) override {
    backward_autocast = mg::amp::is_autocast_enabled();
    backward_low_dtype = mg::amp::autocast_dtype();
    return {F::matmul(dy[0], F::transpose(b, 0, 1)), F::matmul(F::transpose(a, 0, 1), dy[0])};
  }
};
}  // namespace

// PyTorch's test_autocast_custom_cast_inputs: with cast_inputs = float32,
// forward runs without autocast on float32 inputs, so its matmul (bfloat16
// under this autocast) stays float32, and so does the output.
BOOST_AUTO_TEST_CASE(cast_inputs_runs_forward_in_float32_without_autocast) {
  auto a = F::astype(mg::uniform({2, 3}), DType::bfloat16);
  auto b = mg::uniform({3, 2});
  auto fn = std::make_shared<Probe>();
  fn->cast_inputs = DType::float32;
  GradManager gm;
  gm.attach({a, b});
  {
    auto r = gm.record();
    mg::Tensor y;
    {
      mg::amp::autocast scope(true, DType::bfloat16);
      y = mg::autodiff::apply(fn, {a, b})[0];
      BOOST_TEST(F::matmul(a, b).dtype() == DType::bfloat16);  // what the cast protects forward from
    }
    BOOST_TEST((fn->forward_dtypes == std::vector<DType>{DType::float32, DType::float32}));
    BOOST_TEST(!fn->forward_autocast);
    BOOST_TEST(y.dtype() == DType::float32);
    gm.backward(F::sum(y));
  }
  BOOST_TEST(fn->backward_autocast);  // custom_bwd: the state at the call, not forward's inner one
  BOOST_TEST(a.grad().dtype() == DType::bfloat16);  // each input's gradient in its own dtype
  BOOST_TEST(b.grad().dtype() == DType::float32);
}

// PyTorch casts only inside autocast, and never float64 inputs.
BOOST_AUTO_TEST_CASE(cast_inputs_does_nothing_outside_autocast_and_to_float64) {
  auto fn = std::make_shared<Probe>();
  fn->cast_inputs = DType::float32;
  mg::autodiff::apply(fn, {F::astype(mg::uniform({2, 3}), DType::bfloat16), F::astype(mg::uniform({3, 2}), DType::bfloat16)});
  BOOST_TEST((fn->forward_dtypes == std::vector<DType>{DType::bfloat16, DType::bfloat16}));

  auto fn64 = std::make_shared<Probe>();
  fn64->cast_inputs = DType::float16;
  {
    mg::amp::autocast scope(true, DType::bfloat16);
    mg::autodiff::apply(fn64, {F::astype(mg::uniform({2, 3}), DType::float64), mg::uniform({3, 2})});
  }
  BOOST_TEST((fn64->forward_dtypes == std::vector<DType>{DType::float64, DType::float16}));
  BOOST_TEST(!fn64->forward_autocast);
}

// Without cast_inputs forward runs in the caller's autocast (its ops are
// cast by their own policies).
BOOST_AUTO_TEST_CASE(without_cast_inputs_forward_runs_in_the_callers_autocast) {
  auto fn = std::make_shared<Probe>();
  {
    mg::amp::autocast scope(true, DType::bfloat16);
    auto y = mg::autodiff::apply(fn, {mg::uniform({2, 3}), mg::uniform({3, 2})})[0];
    BOOST_TEST(y.dtype() == DType::bfloat16);
  }
  BOOST_TEST(fn->forward_autocast);
  BOOST_TEST((fn->forward_dtypes == std::vector<DType>{DType::float32, DType::float32}));
  BOOST_TEST(fn->out_dtype == DType::bfloat16);
}

// PyTorch's test_autocast_custom_enabled: backward runs with the autocast
// state forward was called in, whatever scope backward itself runs in, and
// the caller's state is back afterwards.
BOOST_AUTO_TEST_CASE(backward_runs_in_the_autocast_state_of_the_forward) {
  auto a = mg::uniform({2, 3}), b = mg::uniform({3, 2});
  {
    auto fn = std::make_shared<Probe>();
    GradManager gm;
    gm.attach({a, b});
    auto r = gm.record();
    mg::Tensor y;
    {
      mg::amp::autocast scope(true, DType::float16);
      y = mg::autodiff::apply(fn, {a, b})[0];
    }
    gm.backward(F::sum(y));  // no scope open here
    BOOST_TEST(fn->backward_autocast);
    BOOST_TEST(fn->backward_low_dtype == DType::float16);
    BOOST_TEST(!mg::amp::is_autocast_enabled());
  }
  {
    auto fn = std::make_shared<Probe>();
    GradManager gm;
    gm.attach({a, b});
    auto r = gm.record();
    auto y = mg::autodiff::apply(fn, {a, b})[0];
    mg::amp::autocast scope(true, DType::bfloat16);
    gm.backward(F::sum(y));
    BOOST_TEST(!fn->backward_autocast);
    BOOST_TEST(mg::amp::is_autocast_enabled());  // the backward's scope is restored
  }
}

// ---- what backward returns -----------------------------------------------

namespace {
// Runs Rigged with `make` as backward on attached a, b whose .grad() are
// preset; returns the message of the error E and checks nothing changed.
template <class E>
std::string rigged_error(std::function<std::vector<mg::Tensor>()> make) {
  auto a = vec({1, 2}), b = vec({3, 4});
  a.set_grad(vec({10, 20}));
  GradManager gm;
  gm.attach({a, b});
  auto fn = std::make_shared<Rigged>();
  fn->make = std::move(make);
  auto r = gm.record();
  auto y = mg::autodiff::apply(fn, {a, b})[0];
  const std::string msg = message_of<E>([&] { gm.backward(F::sum(y)); });
  BOOST_TEST(values(a.grad()) == std::vector<float>({10, 20}), tt::per_element());
  BOOST_TEST(!b.grad().defined());
  BOOST_TEST(!gm.is_recording());
  return msg;
}
}  // namespace

BOOST_AUTO_TEST_CASE(wrong_gradients_are_typed_errors_naming_the_function_and_change_nothing) {
  auto m = rigged_error<mg::ShapeError>([] { return std::vector<mg::Tensor>{vec({1, 1})}; });
  BOOST_TEST(contains(m, "Rigged"));
  BOOST_TEST(contains(m, "1 gradients for 2 inputs"));

  m = rigged_error<mg::ShapeError>([] { return std::vector<mg::Tensor>{vec({1, 1}), vec({1, 1, 1})}; });
  BOOST_TEST(contains(m, "Rigged"));
  BOOST_TEST(contains(m, "float32[3]"));
  BOOST_TEST(contains(m, "float32[2]"));

  m = rigged_error<mg::DTypeError>(
      [] { return std::vector<mg::Tensor>{vec({1, 1}), mg::tensor<int32_t>({1, 1}, {2})}; });
  BOOST_TEST(contains(m, "Rigged"));
  BOOST_TEST(contains(m, "int32[2]"));
}

BOOST_AUTO_TEST_CASE(an_undefined_gradient_means_none_for_that_input) {
  auto a = vec({1, 2}), b = vec({3, 4});
  GradManager gm;
  gm.attach({a, b});
  auto fn = std::make_shared<Rigged>();
  fn->make = [] { return std::vector<mg::Tensor>{mg::Tensor(), vec({7, 8})}; };
  {
    auto r = gm.record();
    gm.backward(F::sum(mg::autodiff::apply(fn, {a, b})[0]));
  }
  BOOST_TEST(!a.grad().defined());
  BOOST_TEST(values(b.grad()) == std::vector<float>({7, 8}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(an_undefined_output_or_a_null_function_is_a_value_error) {
  struct Nothing : mg::autodiff::Function {
    std::string name() const override { return "Nothing"; }
    std::vector<mg::Tensor> forward(const std::vector<mg::Tensor>&) override { return {mg::Tensor()}; }
    std::vector<mg::Tensor> backward(const std::vector<mg::Tensor>&) override { return {}; }
  };
  auto x = vec({1});
  GradManager gm;
  gm.attach(x);
  auto r = gm.record();
  BOOST_TEST(contains(message_of<mg::ValueError>([&] { mg::autodiff::apply(std::make_shared<Nothing>(), {x}); }),
                      "Nothing"));
  BOOST_TEST(mg::autodiff::detail::tape_size(gm) == 0u);
  BOOST_CHECK_THROW(mg::autodiff::apply(nullptr, {x}), mg::ValueError);
}

BOOST_AUTO_TEST_SUITE_END()

// ---- gradient callbacks returning nothing ----------------------------------

BOOST_AUTO_TEST_SUITE(callback_returning_nothing)

// MegEngine's grad_manager.py: a callback's result replaces the gradient and
// the next callback gets it; None means no gradient for the tensor.
BOOST_AUTO_TEST_CASE(leaves_grad_untouched_and_other_tensors_get_theirs) {
  auto a = vec({1, 2}), b = vec({3, 4}), c = vec({5, 6});
  a.set_grad(vec({10, 20}));
  GradManager gm;
  bool next_saw_undefined = false;
  gm.attach(a, {[](const mg::Tensor&, const mg::Tensor&) { return mg::Tensor(); },
                [&](const mg::Tensor&, const mg::Tensor& g) {
                  next_saw_undefined = !g.defined();
                  return g;
                }});
  gm.attach(b, {[](const mg::Tensor&, const mg::Tensor&) { return mg::Tensor(); }});
  gm.attach(c);
  for (int step = 0; step < 2; ++step) {  // and again: nothing accumulates
    auto r = gm.record();
    gm.backward(F::sum(F::mul(F::mul(a, b), c)));
  }
  BOOST_TEST(next_saw_undefined);
  BOOST_TEST(values(a.grad()) == std::vector<float>({10, 20}), tt::per_element());
  BOOST_TEST(!b.grad().defined());
  BOOST_TEST(values(c.grad()) == std::vector<float>({6, 16}), tt::per_element());  // 2 * a * b
}

BOOST_AUTO_TEST_CASE(a_later_callback_may_give_a_gradient_again) {
  auto a = vec({1, 2});
  GradManager gm;
  gm.attach(a, {[](const mg::Tensor&, const mg::Tensor&) { return mg::Tensor(); },
                [](const mg::Tensor&, const mg::Tensor&) { return vec({5, 5}); }});
  auto r = gm.record();
  gm.backward(F::sum(F::mul(a, 3.0)));
  BOOST_TEST(values(a.grad()) == std::vector<float>({5, 5}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(a_gradient_of_the_wrong_shape_is_still_a_shape_error) {
  auto a = vec({1, 2});
  GradManager gm;
  gm.attach(a, {[](const mg::Tensor&, const mg::Tensor&) { return vec({1, 2, 3}); }});
  auto r = gm.record();
  BOOST_CHECK_THROW(gm.backward(F::sum(a)), mg::ShapeError);
  BOOST_TEST(!a.grad().defined());
}

BOOST_AUTO_TEST_SUITE_END()
