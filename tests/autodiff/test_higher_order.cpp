// Higher-order gradients: `gm.backward(y, dy, {.create_graph = true})`
// (PyTorch's create_graph) records the backward on the manager itself, which
// keeps recording; second derivatives, gradient penalties, third order, the
// rules around autocast, no_grad and ops whose backward is not differentiable.
// Nested managers (MegEngine's way to the same) are in test_grad_manager_group.cpp.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../common/test_util.hpp"
#include "hooks/op_hooks.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace F = mixgrad::F;
using mg::autodiff::GradManager;
using test_util::values;
namespace tt = boost::test_tools;

namespace {

mg::Tensor f64(std::vector<double> v, mg::Shape shape) { return mg::tensor(v, shape, mg::DType::float64); }

constexpr mg::autodiff::BackwardOptions kCreateGraph{.create_graph = true};

// The gradient of f at `params` (a plain first-order backward), float64.
std::vector<mg::Tensor> gradient(const std::function<mg::Tensor(const std::vector<mg::Tensor>&)>& f,
                                 const std::vector<mg::Tensor>& params) {
  GradManager gm;
  gm.attach(params);
  for (const auto& p : params) p.set_grad({});
  {
    auto rec = gm.record();
    gm.backward(f(params));
  }
  std::vector<mg::Tensor> out;
  for (const auto& p : params) out.push_back(p.grad().defined() ? p.grad() : mg::zeros_like(p));
  for (const auto& p : params) p.set_grad({});
  return out;
}

// x^2 with a once_differentiable backward (PyTorch's @once_differentiable):
// the one kind of op whose recorded gradient is refused.
struct OnceSquare : mg::autodiff::Function {
  mg::Tensor x;
  OnceSquare() { once_differentiable = true; }
  std::string name() const override { return "OnceSquare"; }
  std::vector<mg::Tensor> forward(const std::vector<mg::Tensor>& in) override {
    x = in[0];
    return {F::mul(x, x)};
  }
  std::vector<mg::Tensor> backward(const std::vector<mg::Tensor>& dy) override {
    return {F::mul(F::mul(x, 2.0), dy[0])};
  }
};

mg::Tensor once_square(const mg::Tensor& x) { return mg::autodiff::apply(std::make_shared<OnceSquare>(), {x})[0]; }

}  // namespace

BOOST_AUTO_TEST_SUITE(higher_order)

// PyTorch's create_graph: d/dx sum(x^3) = 3x^2 is tracked, and its own
// derivative is 6x. The manager keeps recording after the create_graph pass.
BOOST_AUTO_TEST_CASE(second_derivative_of_a_cube) {
  auto x = f64({0.5, -1.0, 2.0}, {3});
  GradManager gm;
  gm.attach(x);
  auto rec = gm.record();
  gm.backward(F::sum(F::mul(F::mul(x, x), x)), {}, kCreateGraph);
  BOOST_TEST(gm.is_recording());
  BOOST_TEST(values(x.grad()) == std::vector<double>({0.75, 3.0, 12.0}), tt::tolerance(1e-12) << tt::per_element());
  const mg::Tensor g = x.grad();
  x.set_grad({});
  gm.backward(F::sum(g));
  BOOST_TEST(!gm.is_recording());
  BOOST_TEST(values(x.grad()) == std::vector<double>({3.0, -6.0, 12.0}), tt::tolerance(1e-12) << tt::per_element());
}

// sub with only its left operand tracked: d/dx sum((x - c)^3) = 3 (x - c)^2,
// and its derivative 6 (x - c) goes back through sub's recorded backward.
BOOST_AUTO_TEST_CASE(second_derivative_through_sub_of_a_constant_tensor) {
  auto x = f64({0.5, -1.0, 2.0}, {3});
  const auto c = f64({1.0, 1.0, -1.0}, {3});
  GradManager gm;
  gm.attach(x);
  auto rec = gm.record();
  const mg::Tensor d = F::sub(x, c);
  gm.backward(F::sum(F::mul(F::mul(d, d), d)), {}, kCreateGraph);
  const mg::Tensor g = x.grad();
  x.set_grad({});
  gm.backward(F::sum(g));
  BOOST_TEST(values(x.grad()) == std::vector<double>({-3.0, -12.0, 18.0}), tt::tolerance(1e-12) << tt::per_element());
}

// Two create_graph passes: d^3/dx^3 x^4 = 24 x.
BOOST_AUTO_TEST_CASE(third_derivative) {
  auto x = f64({0.5, -1.5}, {2});
  GradManager gm;
  gm.attach(x);
  auto rec = gm.record();
  gm.backward(F::sum(F::pow(x, 4.0)), {}, kCreateGraph);
  mg::Tensor g1 = x.grad();
  x.set_grad({});
  gm.backward(F::sum(g1), {}, kCreateGraph);
  mg::Tensor g2 = x.grad();  // 12 x^2
  BOOST_TEST(values(g2) == std::vector<double>({3.0, 27.0}), tt::tolerance(1e-12) << tt::per_element());
  x.set_grad({});
  gm.backward(F::sum(g2));
  BOOST_TEST(values(x.grad()) == std::vector<double>({12.0, -36.0}), tt::tolerance(1e-12) << tt::per_element());
}

// A gradient penalty through a small network (linear, layer_norm, gelu,
// linear, cross_entropy; then linear, tanh, mse): d/dp (L + sum ||dL/dq||^2)
// by create_graph against central differences of that function, where the
// inner gradients come from plain first-order backward passes.
BOOST_AUTO_TEST_CASE(gradient_penalty_matches_finite_differences) {
  mg::manual_seed(11);
  auto x = mg::uniform({4, 3}, -1, 1, mg::DType::float64);
  auto labels = mg::tensor<int64_t>({0, 2, 1, 2}, {4});
  auto target = mg::uniform({4, 2}, -1, 1, mg::DType::float64);
  std::vector<mg::Tensor> params = {mg::uniform({5, 3}, -1, 1, mg::DType::float64),
                                    mg::uniform({5}, -1, 1, mg::DType::float64),
                                    mg::uniform({3, 5}, -1, 1, mg::DType::float64),
                                    mg::uniform({2, 3}, -1, 1, mg::DType::float64)};
  auto loss_of = [&](const std::vector<mg::Tensor>& p) {
    auto h = F::gelu(F::layer_norm(F::linear(x, p[0], p[1]), mg::Shape{5}));
    auto logits = F::linear(h, p[2]);
    auto ce = F::cross_entropy(logits, labels);
    auto reg = F::mse_loss(F::linear(F::tanh(logits), p[3]), target);
    return F::add(ce, reg);
  };
  auto penalised = [&](const std::vector<mg::Tensor>& p) {
    mg::Tensor total = loss_of(p);
    double norm2 = 0;
    for (const auto& g : gradient(loss_of, p))
      for (double v : values(g)) norm2 += v * v;
    return values(total)[0] + norm2;
  };

  GradManager gm;
  gm.attach(params);
  {
    auto rec = gm.record();
    auto loss = loss_of(params);
    gm.backward(loss, {}, kCreateGraph);
    mg::Tensor penalty = mg::zeros({}, mg::DType::float64);
    for (const auto& p : params) {
      penalty = F::add(penalty, F::sum(F::mul(p.grad(), p.grad())));
      p.set_grad({});
    }
    gm.backward(F::add(loss, penalty));
  }
  std::vector<std::vector<double>> analytic_of;  // read first: the differences below clear .grad()
  for (const auto& p : params) analytic_of.push_back(values(p.grad()));
  const double eps = 1e-6;
  for (size_t i = 0; i < params.size(); ++i) {
    BOOST_TEST_CONTEXT("parameter " << i) {
      const auto& analytic = analytic_of[i];
      double* data = params[i].data<double>();
      for (int64_t k = 0; k < params[i].numel(); ++k) {
        const double orig = data[k];
        data[k] = orig + eps;
        const double up = penalised(params);
        data[k] = orig - eps;
        const double down = penalised(params);
        data[k] = orig;
        const double numeric = (up - down) / (2 * eps);
        BOOST_TEST(std::abs(analytic[k] - numeric) <= 1e-5 * (1 + std::abs(numeric)),
                   "element " << k << ": " << analytic[k] << " vs " << numeric);
      }
    }
  }
}

// The create_graph pass gives the same first-order gradients as a plain one.
BOOST_AUTO_TEST_CASE(create_graph_gradients_equal_plain_ones) {
  mg::manual_seed(3);
  auto x = mg::uniform({3, 4}, -1, 1);
  auto w = mg::uniform({4, 4}, -1, 1);
  auto f = [&] {
    return F::sum(F::mul(F::softmax(F::matmul(F::relu(x), w), 1), x)) + F::var(F::mul(F::matmul(x, w), x)) +
           F::norm(w);
  };
  GradManager gm;
  gm.attach({x, w});
  {
    auto rec = gm.record();
    gm.backward(F::mul(f(), f()));
  }
  const auto gx = values(x.grad()), gw = values(w.grad());
  x.set_grad({});
  w.set_grad({});
  {
    auto rec = gm.record();
    gm.backward(F::mul(f(), f()), {}, kCreateGraph);
  }
  BOOST_TEST(values(x.grad()) == gx, tt::tolerance(1e-6) << tt::per_element());
  BOOST_TEST(values(w.grad()) == gw, tt::tolerance(1e-6) << tt::per_element());
}

// The recorded backward keeps the forward's dtypes: a float32 matmul
// differentiated inside an autocast(bfloat16) scope stays in float32 (were
// its backward cast, the values would carry bfloat16 rounding), and so does
// the second derivative.
BOOST_AUTO_TEST_CASE(the_recorded_backward_runs_without_autocast) {
  mg::manual_seed(5);
  auto a = mg::uniform({8, 8}, -1, 1);
  auto b = mg::uniform({8, 8}, -1, 1);
  GradManager gm;
  gm.attach(a);
  auto rec = gm.record();
  auto y = F::sum(F::mul(F::matmul(a, b), F::matmul(a, b)));
  {
    mg::amp::autocast scope(true, mg::DType::bfloat16);
    gm.backward(y, {}, kCreateGraph);
  }
  const mg::Tensor g = a.grad();
  BOOST_TEST(g.dtype() == mg::DType::float32);
  // 2 (a b) b^T, computed here in float64.
  const auto ab = values(F::matmul(a.to(mg::DType::float64), b.to(mg::DType::float64)));
  const auto bv = values(b);
  for (int i = 0; i < 8; ++i)
    for (int k = 0; k < 8; ++k) {
      double e = 0;
      for (int j = 0; j < 8; ++j) e += 2 * ab[i * 8 + j] * bv[k * 8 + j];
      BOOST_TEST(std::abs(values(g)[i * 8 + k] - e) <= 1e-5 * (1 + std::abs(e)));
    }
  a.set_grad({});
  gm.backward(F::sum(g));
  BOOST_TEST(a.grad().dtype() == mg::DType::float32);
}

// PyTorch's AMP gradient-penalty recipe: the forward under autocast
// (bfloat16 linears), the penalty's backward outside it. Every gradient comes
// back in its parameter's dtype (float32) and near the float32 run's values.
BOOST_AUTO_TEST_CASE(gradient_penalty_through_an_autocast_forward) {
  mg::manual_seed(21);
  auto x = mg::uniform({6, 8}, -1, 1);
  auto target = mg::uniform({6, 4}, -1, 1);
  auto w1 = mg::uniform({16, 8}, -0.4, 0.4), w2 = mg::uniform({4, 16}, -0.4, 0.4);
  auto run = [&](bool amp) {
    GradManager gm;
    gm.attach({w1, w2});
    w1.set_grad({});
    w2.set_grad({});
    auto rec = gm.record();
    mg::Tensor loss;
    {
      mg::amp::autocast scope(amp, mg::DType::bfloat16);
      loss = F::mse_loss(F::linear(F::tanh(F::linear(x, w1)), w2), target);
    }
    gm.backward(loss, {}, kCreateGraph);
    BOOST_TEST(w1.grad().dtype() == mg::DType::float32);
    auto penalty = F::add(F::sum(F::mul(w1.grad(), w1.grad())), F::sum(F::mul(w2.grad(), w2.grad())));
    w1.set_grad({});
    w2.set_grad({});
    gm.backward(F::add(loss, penalty));
    return std::vector{values(w1.grad()), values(w2.grad())};
  };
  const auto reference = run(false), mixed = run(true);
  BOOST_TEST(w1.grad().dtype() == mg::DType::float32);
  for (size_t k = 0; k < 2; ++k) {
    double scale = 0;
    for (double v : reference[k]) scale = std::max(scale, std::abs(v));
    BOOST_TEST_REQUIRE(scale > 0);
    for (size_t j = 0; j < reference[k].size(); ++j)
      BOOST_TEST(std::abs(mixed[k][j] - reference[k][j]) <= 0.05 * scale,
                 "parameter " << k << " element " << j << ": " << mixed[k][j] << " vs " << reference[k][j]);
  }
}

// Ops linear in x (average pooling, resampling, padding): their recorded
// gradient is a node on g whose backward is the op itself; max pooling's
// records a scatter to the maxima whose backward gathers from them. Hessian-vector products of
// sum(op(x)^2 * c) (where g depends on x) against central differences.
BOOST_AUTO_TEST_CASE(linear_ops_differentiate_through_their_recorded_gradient) {
  using Op = std::function<mg::Tensor(const mg::Tensor&)>;
  const std::vector<std::pair<const char*, Op>> ops = {
      {"avg_pool2d", [](const mg::Tensor& t) { return F::avg_pool2d(t, {.kernel_size = 2, .stride = 1}); }},
      {"adaptive_avg_pool2d", [](const mg::Tensor& t) { return F::adaptive_avg_pool2d(t, {2, 3}); }},
      {"pad_reflect", [](const mg::Tensor& t) { return F::pad(t, {2, 1, 1, 2}, F::PadMode::reflect); }},
      {"pad_constant", [](const mg::Tensor& t) { return F::pad(t, {1, 1, 0, 2}, F::PadMode::constant, 0.5); }},
      {"upsample_nearest", [](const mg::Tensor& t) { return F::interpolate(t, {.size = {5, 7}}); }},
      // Max pooling: linear in g with positions piecewise constant in x.
      {"max_pool2d_overlapping", [](const mg::Tensor& t) { return F::max_pool2d(t, {.kernel_size = 2, .stride = 1}); }},
      {"max_pool2d_padding",
       [](const mg::Tensor& t) { return F::max_pool2d(t, {.kernel_size = 3, .stride = 2, .padding = 1}); }},
      {"max_pool2d_2x2", [](const mg::Tensor& t) { return F::max_pool2d(t, {.kernel_size = 2}); }},
      {"max_pool1d",
       [](const mg::Tensor& t) {
         return F::max_pool1d(F::reshape(t, {1, 2, 20}), {.kernel_size = 3, .stride = 2, .padding = 1});
       }},
      // Convolutions (bilinear) with a fixed weight: the recorded data gradient's own backward.
      {"conv2d_groups_stride_padding_dilation",
       [](const mg::Tensor& t) {
         mg::manual_seed(5);
         const auto w = mg::uniform({4, 1, 2, 2}, -1, 1, mg::DType::float64);
         return F::conv2d(t, w, {}, {.stride = {1, 2}, .padding = 1, .dilation = {2, 1}, .groups = 2});
       }},
      {"conv_transpose2d_stride",
       [](const mg::Tensor& t) {
         mg::manual_seed(6);
         const auto w = mg::uniform({2, 3, 3, 2}, -1, 1, mg::DType::float64);
         return F::conv_transpose2d(t, w, {}, {.stride = 2, .padding = 1, .output_padding = 1});
       }},
      {"max_pool3d",
       [](const mg::Tensor& t) {
         return F::max_pool3d(F::reshape(t, {1, 1, 2, 4, 5}), {.kernel_size = {2, 2, 2}, .stride = {1, 1, 2}});
       }},
      {"upsample_bilinear",
       [](const mg::Tensor& t) {
         return F::interpolate(t, {.size = {5, 6}, .mode = F::InterpolateMode::bilinear});
       }},
  };
  for (const auto& entry : ops) {
    const auto& name = entry.first;
    const auto& op = entry.second;  // a named variable: clang 14 cannot capture a structured binding
    BOOST_TEST_CONTEXT(name) {
      mg::manual_seed(31);
      auto x = mg::uniform({1, 2, 4, 5}, -1, 1, mg::DType::float64);
      auto v = mg::uniform({1, 2, 4, 5}, -1, 1, mg::DType::float64);
      const mg::Tensor c = mg::uniform(op(x).shape(), 0.5, 1.5, mg::DType::float64);
      auto f = [&](const std::vector<mg::Tensor>& p) { return F::sum(F::mul(F::mul(op(p[0]), op(p[0])), c)); };
      GradManager gm;
      gm.attach(x);
      {
        auto rec = gm.record();
        gm.backward(f({x}), {}, kCreateGraph);
        mg::Tensor g = x.grad();
        x.set_grad({});
        gm.backward(F::sum(F::mul(g, v)));
      }
      const auto analytic = values(x.grad());
      x.set_grad({});
      const auto vv = values(v);
      double* data = x.data<double>();
      const double eps = 1e-6;
      for (int64_t k = 0; k < x.numel(); ++k) {
        auto directional = [&] {
          double d = 0;
          const auto g = values(gradient(f, {x})[0]);
          for (size_t j = 0; j < g.size(); ++j) d += g[j] * vv[j];
          return d;
        };
        const double orig = data[k];
        data[k] = orig + eps;
        const double up = directional();
        data[k] = orig - eps;
        const double down = directional();
        data[k] = orig;
        const double numeric = (up - down) / (2 * eps);
        BOOST_TEST(std::abs(analytic[k] - numeric) <= 1e-5 * (1 + std::abs(numeric)),
                   "element " << k << ": " << analytic[k] << " vs " << numeric);
      }
    }
  }
}

// An op whose backward is not differentiable (a once_differentiable
// function): the create_graph pass itself works and gives the right
// first-order gradient; differentiating through it throws StateError naming
// the op, with no .grad() changed.
BOOST_AUTO_TEST_CASE(a_non_differentiable_backward_is_refused_when_reached) {
  auto x = f64({0.5, -2.0}, {2});
  GradManager gm;
  gm.attach(x);
  auto rec = gm.record();
  auto y = F::sum(F::mul(once_square(x), 3.0));
  gm.backward(y, {}, kCreateGraph);
  BOOST_TEST(values(x.grad()) == std::vector<double>({3.0, -12.0}), tt::tolerance(1e-12) << tt::per_element());
  mg::Tensor g = x.grad();
  x.set_grad({});
  test_util::check_error<mg::StateError>([&] { gm.backward(F::sum(F::mul(g, g))); },
                                         {"GradManager::backward", "OnceSquare", "not twice differentiable"});
  BOOST_TEST(!x.grad().defined());
}

// A unary op's recorded gradient is its kernel's derivative run on Tensors
// (kernels/unary.hpp); where e^x would overflow (mish past its linear
// threshold, silu and softplus far below 0) the second derivative stays
// finite: 0, the tails' exact value, at +-800.
BOOST_AUTO_TEST_CASE(unary_second_derivatives_stay_finite_where_exp_overflows) {
  const std::vector<std::pair<const char*, std::function<mg::Tensor(const mg::Tensor&)>>> ops{
      {"mish", [](const mg::Tensor& x) { return F::mish(x); }},
      {"silu", [](const mg::Tensor& x) { return F::silu(x); }},
      {"softplus", [](const mg::Tensor& x) { return F::softplus(x, 1.0, 1e6); }}};
  for (const auto& [name, op] : ops) {
    BOOST_TEST_CONTEXT(name) {
      auto x = f64({-800.0, 800.0}, {2});
      GradManager gm;
      gm.attach(x);
      auto rec = gm.record();
      gm.backward(F::sum(op(x)), {}, kCreateGraph);
      mg::Tensor g = x.grad();
      x.set_grad({});
      gm.backward(F::sum(g));
      const std::vector<double> second = values(x.grad());
      BOOST_TEST(std::isfinite(second[0]));
      BOOST_TEST(std::isfinite(second[1]));
      BOOST_TEST(second == std::vector<double>({0.0, 0.0}), tt::tolerance(1e-12) << tt::per_element());
    }
  }
}

// A built-in op names itself by the OpKind its tape node records: a closure
// recorded as OpKind::conv1d that never asks create_graph() is refused as
// F::conv1d, whatever function its lambda sits in.
BOOST_AUTO_TEST_CASE(a_refused_backward_names_the_op_kind_its_node_records) {
  auto x = f64({0.5, -2.0}, {2});
  GradManager gm;
  gm.attach(x);
  auto rec = gm.record();
  mg::Tensor out;
  {
    mg::autodiff::NoRecordScope plain;
    out = F::mul(x, x);
  }
  mg::autodiff::record(mg::OpKind::conv1d, {&x}, out, [&] {
    return [x](const mg::Tensor& g, mg::autodiff::InputGrads& gi) {
      mg::autodiff::NoRecordScope unrecorded;  // never asks create_graph(): not differentiable
      gi.set(0, F::mul(F::mul(g, x), 2.0));
    };
  });
  gm.backward(F::sum(out), {}, kCreateGraph);
  mg::Tensor g = x.grad();
  x.set_grad({});
  test_util::check_error<mg::StateError>([&] { gm.backward(F::sum(F::mul(g, g))); },
                                         {"GradManager::backward", "F::conv1d", "not twice differentiable"});
}

// The same op is fine when the second backward does not go through it.
BOOST_AUTO_TEST_CASE(a_non_differentiable_op_off_the_second_path_is_fine) {
  auto x = f64({0.5, 2.0}, {2});
  auto w = f64({1.0, 3.0}, {2});
  GradManager gm;
  gm.attach({x, w});
  auto rec = gm.record();
  auto y = F::add(F::sum(F::mul(F::mul(x, x), w)), F::sum(once_square(w)));  // not twice differentiable
  gm.backward(y, {}, kCreateGraph);
  mg::Tensor gx = x.grad();  // 2 x w: through mul only
  x.set_grad({});
  w.set_grad({});
  gm.backward(F::sum(gx));   // d/dw = 2x, d/dx = 2w
  BOOST_TEST(values(x.grad()) == std::vector<double>({2.0, 6.0}), tt::tolerance(1e-12) << tt::per_element());
  BOOST_TEST(values(w.grad()) == std::vector<double>({1.0, 4.0}), tt::tolerance(1e-12) << tt::per_element());
}

// create_graph where nothing may be recorded is refused before anything runs.
BOOST_AUTO_TEST_CASE(create_graph_in_a_no_grad_scope_is_refused) {
  auto x = f64({1.0}, {1});
  GradManager gm;
  gm.attach(x);
  auto rec = gm.record();
  auto y = F::mul(x, x);
  {
    mg::autodiff::no_grad guard;
    test_util::check_error<mg::StateError>([&] { gm.backward(y, {}, kCreateGraph); },
                                           {"GradManager::backward", "create_graph", "no_grad"});
  }
  BOOST_TEST(gm.is_recording());
  BOOST_TEST(!x.grad().defined());
}

// A custom Function whose backward is written with F:: ops is twice
// differentiable (as a PyTorch Function without once_differentiable).
BOOST_AUTO_TEST_CASE(a_custom_function_written_with_ops_is_twice_differentiable) {
  struct Cube : mg::autodiff::Function {
    mg::Tensor x;
    std::string name() const override { return "Cube"; }
    std::vector<mg::Tensor> forward(const std::vector<mg::Tensor>& in) override {
      x = in[0];
      return {F::mul(F::mul(x, x), x)};
    }
    std::vector<mg::Tensor> backward(const std::vector<mg::Tensor>& dy) override {
      return {F::mul(F::mul(F::mul(x, x), 3.0), dy[0])};
    }
  };
  auto x = f64({0.5, -2.0}, {2});
  GradManager gm;
  gm.attach(x);
  auto rec = gm.record();
  auto y = mg::autodiff::apply(std::make_shared<Cube>(), {x})[0];
  gm.backward(F::sum(y), {}, kCreateGraph);
  mg::Tensor g = x.grad();
  x.set_grad({});
  gm.backward(F::sum(g));
  BOOST_TEST(values(x.grad()) == std::vector<double>({3.0, -12.0}), tt::tolerance(1e-12) << tt::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
