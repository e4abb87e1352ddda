// Drives every registered op case through the checks: the gradient against
// finite differences, the result on one device and dtype against another
// (ggml's test-backend-ops eval(backend1, backend2)), and that the op reads
// its autocast entry. `test_ops --op NAME` limits them to one op (main.cpp).
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <exception>
#include <sstream>

#include "hooks/op_hooks.hpp"
#include "backend/dispatch.hpp"
#include "op_registry.hpp"

namespace {

using namespace optest;

// Inputs of one case in `dtype`, reproducible per case and input.
Inputs make_inputs(const OpCase& c, mg::DType dtype, uint64_t seed) {
  Inputs xs;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    mg::manual_seed(seed * 131 + i);
    const InputSpec& s = c.inputs[i];
    xs.push_back(s.make ? s.make(dtype) : mg::uniform(s.shape, s.low, s.high, dtype));
  }
  return xs;
}

uint64_t seed_of(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (char ch : name) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  return h;
}

// sum(y * w) with fixed weights w: every output element matters.
double weighted_sum(const mg::Tensor& y, const std::vector<double>& w) {
  const auto v = y.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * w[i];
  return s;
}

void check_gradient(const OpCase& c) {
  BOOST_TEST_CONTEXT("op case " << c.name) {
    Inputs xs = make_inputs(c, mg::DType::float64, seed_of(c.name));
    mg::autodiff::GradManager gm;
    std::vector<size_t> checked;
    for (size_t i = 0; i < xs.size(); ++i)
      if (c.inputs[i].differentiable && xs[i].dtype() == mg::DType::float64) {
        gm.attach(xs[i]);
        checked.push_back(i);
      }
    BOOST_TEST_REQUIRE(!checked.empty(), "case has no differentiable float64 input");
    mg::Tensor y;
    std::vector<double> w;
    {
      auto rec = gm.record();
      y = c.run(xs);
      BOOST_TEST_REQUIRE(y.dtype() == mg::DType::float64);
      mg::manual_seed(7);
      mg::Tensor wt = mg::uniform(y.shape(), 0.5, 1.5, mg::DType::float64);
      w = wt.to_vector<double>();
      gm.backward(y, wt);
    }
    for (size_t i : checked) {
      BOOST_TEST_CONTEXT("input " << i << " of shape " << xs[i].shape()) {
        mg::Tensor g = xs[i].grad();
        BOOST_TEST_REQUIRE(g.defined(), "no gradient reached the input");
        BOOST_TEST_REQUIRE(g.shape() == xs[i].shape());
        const auto analytic = g.to_vector<double>();
        double* data = xs[i].data<double>();
        for (int64_t k = 0; k < xs[i].numel(); ++k) {
          const double orig = data[k];
          data[k] = orig + c.eps;
          const double up = weighted_sum(c.run(xs), w);
          data[k] = orig - c.eps;
          const double down = weighted_sum(c.run(xs), w);
          data[k] = orig;
          const double numeric = (up - down) / (2 * c.eps);
          const double tol = c.grad_tolerance * (1.0 + std::abs(numeric));
          BOOST_TEST(std::abs(analytic[k] - numeric) <= tol,
                     "element " << k << ": analytic " << analytic[k] << " vs numeric " << numeric);
        }
      }
    }
  }
}

// Second derivatives (create_graph). With w the fixed output weights of the
// first check and v_i fixed directions, D(x) = sum_i <dL/dx_i, v_i> for
// L = sum(y * w); its gradient (a Hessian-vector product) comes from
// differentiating the recorded first backward, and is compared with central
// differences of D, each D from a plain first-order backward in float64.
struct SecondOrderSetup {
  Inputs xs;
  std::vector<size_t> checked;
  mg::Tensor w;
  std::vector<mg::Tensor> v;  // one per input (undefined where not checked)
};

SecondOrderSetup second_order_setup(const OpCase& c) {
  SecondOrderSetup s;
  s.xs = make_inputs(c, mg::DType::float64, seed_of(c.name));
  for (size_t i = 0; i < s.xs.size(); ++i)
    if (c.inputs[i].differentiable && s.xs[i].dtype() == mg::DType::float64) s.checked.push_back(i);
  const mg::Tensor y = c.run(s.xs);
  mg::manual_seed(7);
  s.w = mg::uniform(y.shape(), 0.5, 1.5, mg::DType::float64);
  s.v.resize(s.xs.size());
  for (size_t i : s.checked) {
    mg::manual_seed(100 + i);
    s.v[i] = mg::uniform(s.xs[i].shape(), -1.0, 1.0, mg::DType::float64);
  }
  return s;
}

// D(x) at the current input values, from a plain first-order backward.
double directional_derivative(const OpCase& c, const SecondOrderSetup& s) {
  mg::autodiff::GradManager gm;
  for (size_t i : s.checked) {
    gm.attach(s.xs[i]);
    s.xs[i].set_grad({});
  }
  {
    auto rec = gm.record();
    gm.backward(c.run(s.xs), s.w);
  }
  double d = 0;
  for (size_t i : s.checked) {
    if (!s.xs[i].grad().defined()) continue;
    const auto g = s.xs[i].grad().to_vector<double>(), v = s.v[i].to_vector<double>();
    for (size_t k = 0; k < g.size(); ++k) d += g[k] * v[k];
    s.xs[i].set_grad({});
  }
  return d;
}

// Records the first backward and returns D's graph (undefined when no
// gradient depends on the inputs); the manager still records.
mg::Tensor recorded_directional_derivative(const OpCase& c, const SecondOrderSetup& s, mg::autodiff::GradManager& gm) {
  gm.backward(c.run(s.xs), s.w, {.create_graph = true});
  mg::Tensor d;
  for (size_t i : s.checked) {
    const mg::Tensor g = s.xs[i].grad();
    s.xs[i].set_grad({});
    if (!g.defined()) continue;
    const mg::Tensor term = mg::F::sum(mg::F::mul(g, s.v[i]));
    d = d.defined() ? mg::F::add(d, term) : term;
  }
  return d;
}

void check_second_derivative(const OpCase& c) {
  BOOST_TEST_CONTEXT("op case " << c.name << " (" << mg::op_name(c.op) << ")") {
    SecondOrderSetup s = second_order_setup(c);
    BOOST_TEST_REQUIRE(!s.checked.empty(), "case has no differentiable float64 input");
    mg::autodiff::GradManager gm;
    for (size_t i : s.checked) gm.attach(s.xs[i]);
    {
      auto rec = gm.record();
      const mg::Tensor d = recorded_directional_derivative(c, s, gm);
      if (d.defined()) gm.backward(d);
    }
    std::vector<std::vector<double>> analytic_of(s.xs.size());  // read first: the differences clear .grad()
    for (size_t i : s.checked) {
      const mg::Tensor h = s.xs[i].grad();
      analytic_of[i] = h.defined() ? h.to_vector<double>() : std::vector<double>(s.xs[i].numel(), 0.0);
      s.xs[i].set_grad({});
    }
    for (size_t i : s.checked) {
      BOOST_TEST_CONTEXT("input " << i << " of shape " << s.xs[i].shape()) {
        const auto& analytic = analytic_of[i];
        double* data = s.xs[i].data<double>();
        for (int64_t k = 0; k < s.xs[i].numel(); ++k) {
          const double orig = data[k];
          data[k] = orig + c.eps;
          const double up = directional_derivative(c, s);
          data[k] = orig - c.eps;
          const double down = directional_derivative(c, s);
          data[k] = orig;
          const double numeric = (up - down) / (2 * c.eps);
          const double tol = 20 * c.grad_tolerance * (1.0 + std::abs(numeric));
          BOOST_TEST(std::abs(analytic[k] - numeric) <= tol,
                     "element " << k << ": second-order analytic " << analytic[k] << " vs numeric " << numeric);
        }
      }
    }
  }
}

// An op marked not twice differentiable records its gradient as such: the
// create_graph pass works, and a backward through its gradient is refused.
void check_second_derivative_is_refused(const OpCase& c) {
  BOOST_TEST_CONTEXT("op case " << c.name << " (" << mg::op_name(c.op) << ")") {
    SecondOrderSetup s = second_order_setup(c);
    mg::autodiff::GradManager gm;
    for (size_t i : s.checked) gm.attach(s.xs[i]);
    auto rec = gm.record();
    const mg::Tensor d = recorded_directional_derivative(c, s, gm);
    BOOST_TEST_REQUIRE(d.defined(), "no gradient reached the inputs");
    try {
      gm.backward(d);
      BOOST_ERROR("a backward through the gradient of an op marked not twice differentiable did not throw; "
                  "if its backward is differentiable now, list it as such in op_registry.hpp");
    } catch (const mg::StateError& e) {
      BOOST_TEST(std::string(e.what()).find("not twice differentiable") != std::string::npos, e.what());
    }
  }
}

// Where and in what dtype one side of a comparison runs.
struct Target {
  mg::Device device;
  mg::DType dtype;
};

std::ostream& operator<<(std::ostream& os, const Target& t) { return os << t.dtype << " on " << t.device; }

// Relative tolerance of a result computed in `dtype` against a reference.
double tolerance(mg::DType dtype) {
  switch (dtype) {
    case mg::DType::bfloat16: return 2e-2;
    case mg::DType::float16: return 3e-3;
    default: return 1e-4;  // float32: summation order differs between devices
  }
}

// Runs `c` on `test` and on `ref` with the same input values (made in
// test.dtype, so rounding the inputs is not what is measured), copies both
// results to the host and compares them within test.dtype's tolerance.
void eval(const OpCase& c, Target test, Target ref) {
  BOOST_TEST_CONTEXT("op case " << c.name << " (" << mg::op_name(c.op) << "): " << test << " vs " << ref) {
    const Inputs made = make_inputs(c, test.dtype, seed_of(c.name));
    Inputs on_test, on_ref;
    for (const auto& x : made) {
      const bool fp = mg::is_floating_point(x.dtype());
      on_test.push_back((fp ? x.to(test.dtype) : x).to(test.device));
      on_ref.push_back((fp ? x.to(ref.dtype) : x).to(ref.device));
    }
    const mg::Tensor y = c.run(on_test).to(mg::Device::cpu());
    const mg::Tensor y_ref = c.run(on_ref).to(mg::Device::cpu());
    BOOST_TEST_REQUIRE(y.shape() == y_ref.shape());
    if (mg::is_floating_point(y_ref.dtype())) BOOST_TEST(y.dtype() == test.dtype, "output dtype " << y.dtype());
    const double tol = tolerance(test.dtype) * c.lowp_tolerance;
    const auto a = y.to_vector<double>();
    const auto b = y_ref.to_vector<double>();
    double scale = 0;
    for (double v : b) scale = std::max(scale, std::abs(v));
    for (size_t k = 0; k < a.size(); ++k)
      BOOST_TEST(std::abs(a[k] - b[k]) <= tol * (std::abs(b[k]) + 0.1 * scale + 1e-3),
                 "element " << k << ": " << a[k] << " vs reference " << b[k]);
  }
}

bool has_cuda() { return mg::cuda::device_count() > 0; }

// The gradients of <w, op(xs)> (w fixed and random) for every differentiable
// input, computed in `dtype` on `device` from the inputs eval() uses, on the
// host as doubles.
std::vector<std::vector<double>> input_gradients(const OpCase& c, Target t) {
  const Inputs made = make_inputs(c, t.dtype, seed_of(c.name));
  Inputs xs;
  for (const auto& x : made) xs.push_back((mg::is_floating_point(x.dtype()) ? x.to(t.dtype) : x).to(t.device));
  mg::autodiff::GradManager gm;
  std::vector<size_t> checked;
  for (size_t i = 0; i < xs.size(); ++i)
    if (c.inputs[i].differentiable && mg::is_floating_point(xs[i].dtype())) {
      gm.attach(xs[i]);
      checked.push_back(i);
    }
  {
    auto rec = gm.record();
    const mg::Tensor y = c.run(xs);
    mg::manual_seed(7);
    gm.backward(y, mg::uniform(y.shape(), 0.5, 1.5).to(y.dtype()).to(t.device));
  }
  std::vector<std::vector<double>> out;
  for (size_t i : checked) {
    const mg::Tensor g = xs[i].grad();
    out.push_back(g.defined() ? g.to(mg::Device::cpu()).to_vector<double>() : std::vector<double>(xs[i].numel(), 0.0));
  }
  return out;
}

// Compares the input gradients of `c` on `test` with those on `ref`, within
// test.dtype's tolerance as eval() does for values.
void eval_gradients(const OpCase& c, Target test, Target ref) {
  BOOST_TEST_CONTEXT("op case " << c.name << " (" << mg::op_name(c.op) << ") gradients: " << test << " vs " << ref) {
    const auto got = input_gradients(c, test), want = input_gradients(c, ref);
    BOOST_TEST_REQUIRE(got.size() == want.size());
    const double tol = tolerance(test.dtype) * c.lowp_tolerance;
    for (size_t i = 0; i < want.size(); ++i) {
      BOOST_TEST_REQUIRE(got[i].size() == want[i].size());
      double scale = 0;
      for (double v : want[i]) scale = std::max(scale, std::abs(v));
      for (size_t k = 0; k < want[i].size(); ++k)
        BOOST_TEST(std::abs(got[i][k] - want[i][k]) <= tol * (std::abs(want[i][k]) + 0.1 * scale + 1e-3),
                   "input " << i << " element " << k << ": " << got[i][k] << " vs reference " << want[i][k]);
    }
  }
}

// The case's op reads its table entry: with the entry replaced by `high`, a
// 16-bit input gives a float32 result. (Integer and bool outputs, argmax and
// comparisons, show nothing; views and astype have fixed entries.)
void check_reads_policy(const OpCase& c) {
  BOOST_TEST_CONTEXT("op case " << c.name << " (" << mg::op_name(c.op) << ")") {
    Inputs xs = make_inputs(c, mg::DType::bfloat16, seed_of(c.name));
    mg::Tensor y;
    {
      mg::amp::autocast scope(true, mg::DType::bfloat16);
      mg::amp::detail::PolicyOverride high(c.op, mg::amp::CastPolicy::high);
      y = c.run(xs);
    }
    if (mg::is_floating_point(y.dtype()))
      BOOST_TEST(y.dtype() == mg::DType::float32, "output dtype " << y.dtype() << " with its entry set to high");
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(op_registry)

BOOST_AUTO_TEST_CASE(registry_is_not_empty) { BOOST_TEST(all_op_cases().size() > 0u); }

// The cases_of<> specializations guarantee this at compile time; here the
// same holds for the cases actually collected (and names the op if not).
BOOST_AUTO_TEST_CASE(every_op_of_the_table_has_a_case) {
  const auto cases = all_op_cases();
  for (size_t i = 0; i < mg::kOpCount; ++i) {
    const auto op = static_cast<mg::OpKind>(i);
    if (op_filter() && op != *op_filter()) continue;
    const bool found = std::any_of(cases.begin(), cases.end(), [&](const OpCase& c) { return c.op == op; });
    BOOST_TEST(found, "no registry case for op " << mg::op_name(op));
  }
}

BOOST_AUTO_TEST_CASE(every_op_gradient_matches_finite_differences_in_float64) {
  for (const auto& c : all_op_cases())
    if (c.check_gradient) check_gradient(c);
}

// The op table's gradient column agrees with the cases: an op with a
// gradient has a case that checks it (and so its second order), an op
// without one has none that would.
BOOST_AUTO_TEST_CASE(every_op_gradient_entry_matches_its_cases) {
  const auto cases = all_op_cases();
  for (size_t i = 0; i < mg::kOpCount; ++i) {
    const auto op = static_cast<mg::OpKind>(i);
    if (op_filter() && op != *op_filter()) continue;
    bool checked = false;
    for (const auto& c : cases)
      if (c.op == op && c.check_gradient) checked = true;
    const bool has_gradient = second_order(op) != SecondOrder::no_gradient;
    BOOST_TEST(checked == has_gradient, "op " << mg::op_name(op) << ": op_table.def says "
                                              << (has_gradient ? "it has a gradient, but no case checks one"
                                                               : "none, but a case checks a gradient"));
  }
}

BOOST_AUTO_TEST_CASE(every_twice_differentiable_op_second_derivative_matches_finite_differences_in_float64) {
  for (const auto& c : all_op_cases())
    if (c.check_gradient && twice_differentiable(c)) check_second_derivative(c);
}

BOOST_AUTO_TEST_CASE(every_other_op_refuses_a_backward_through_its_gradient) {
  for (const auto& c : all_op_cases())
    if (c.check_gradient && !twice_differentiable(c)) check_second_derivative_is_refused(c);
}

// CPU against the CPU reference: 16-bit results against float32.
BOOST_AUTO_TEST_CASE(every_op_in_bfloat16_matches_float32) {
  for (const auto& c : all_op_cases())
    if (c.check_low_precision) eval(c, {mg::Device::cpu(), mg::DType::bfloat16}, {mg::Device::cpu(), mg::DType::float32});
}

BOOST_AUTO_TEST_CASE(every_op_in_float16_matches_float32) {
  for (const auto& c : all_op_cases())
    if (c.check_low_precision) eval(c, {mg::Device::cpu(), mg::DType::float16}, {mg::Device::cpu(), mg::DType::float32});
}

// CUDA against the CPU, dtype for dtype; skipped without a CUDA device.
BOOST_AUTO_TEST_CASE(every_op_on_cuda_matches_the_cpu,
                     *boost::unit_test::precondition([](boost::unit_test::test_unit_id) { return has_cuda(); })) {
  for (mg::DType dtype : {mg::DType::float32, mg::DType::bfloat16, mg::DType::float16})
    for (const auto& c : all_op_cases()) {
      if (!c.same_on_every_device) continue;
      if (dtype != mg::DType::float32 && !c.check_low_precision) continue;
      // A case that throws (a family without a CUDA kernel, a dtype a
      // kernel refuses, a CUDA error) fails here by name, and the other
      // cases still run.
      try {
        eval(c, {mg::Device::cuda(), dtype}, {mg::Device::cpu(), dtype});
      } catch (const std::exception& e) {
        BOOST_ERROR("op case " << c.name << " (" << mg::op_name(c.op) << ") in " << dtype << " on CUDA: " << e.what());
      }
    }
}

// The input gradients on CUDA against the CPU, dtype for dtype (the same
// 16-bit inputs on both sides); skipped without a CUDA device.
BOOST_AUTO_TEST_CASE(every_op_gradient_on_cuda_matches_the_cpu,
                     *boost::unit_test::precondition([](boost::unit_test::test_unit_id) { return has_cuda(); })) {
  for (mg::DType dtype : {mg::DType::float32, mg::DType::bfloat16, mg::DType::float16})
    for (const auto& c : all_op_cases()) {
      if (!c.check_gradient || !c.same_on_every_device) continue;
      if (dtype != mg::DType::float32 && !c.check_low_precision) continue;
      try {
        eval_gradients(c, {mg::Device::cuda(), dtype}, {mg::Device::cpu(), dtype});
      } catch (const std::exception& e) {
        BOOST_ERROR("op case " << c.name << " (" << mg::op_name(c.op) << ") gradients in " << dtype
                               << " on CUDA: " << e.what());
      }
    }
}

// The second-derivative setup above (float64) on CUDA against the CPU: the
// recorded (create_graph) backward of every twice differentiable op and the
// backward through it, so the kernels only recorded gradients use (max
// pooling's argmax and its gather, ...) are compared too. Skipped without a
// CUDA device.
BOOST_AUTO_TEST_CASE(every_twice_differentiable_op_second_derivative_on_cuda_matches_the_cpu,
                     *boost::unit_test::precondition([](boost::unit_test::test_unit_id) { return has_cuda(); })) {
  for (const auto& c : all_op_cases()) {
    if (!c.check_gradient || !twice_differentiable(c) || !c.same_on_every_device) continue;
    BOOST_TEST_CONTEXT("op case " << c.name << " (" << mg::op_name(c.op) << ")") {
      auto hessian_vector = [&c](mg::Device device) {
        SecondOrderSetup s = second_order_setup(c);
        for (auto& x : s.xs) x = x.to(device);
        s.w = s.w.to(device);
        for (auto& v : s.v)
          if (v.defined()) v = v.to(device);
        mg::autodiff::GradManager gm;
        for (size_t i : s.checked) gm.attach(s.xs[i]);
        {
          auto rec = gm.record();
          const mg::Tensor d = recorded_directional_derivative(c, s, gm);
          if (d.defined()) gm.backward(d);
        }
        std::vector<std::vector<double>> out;
        for (size_t i : s.checked) {
          const mg::Tensor h = s.xs[i].grad();
          out.push_back(h.defined() ? h.to(mg::Device::cpu()).to_vector<double>()
                                    : std::vector<double>(s.xs[i].numel(), 0.0));
        }
        return out;
      };
      try {
        const auto want = hessian_vector(mg::Device::cpu());
        const auto got = hessian_vector(mg::Device::cuda(0));
        BOOST_TEST_REQUIRE(got.size() == want.size());
        for (size_t i = 0; i < want.size(); ++i) {
          double scale = 0;
          for (double v : want[i]) scale = std::max(scale, std::abs(v));
          for (size_t k = 0; k < want[i].size(); ++k)
            BOOST_TEST(std::abs(got[i][k] - want[i][k]) <= 1e-9 * (scale + 1.0),
                       "input " << i << " element " << k << ": " << got[i][k] << " on CUDA vs " << want[i][k]);
        }
      } catch (const std::exception& e) {
        BOOST_ERROR("op case " << c.name << " (" << mg::op_name(c.op) << ") second order on CUDA: " << e.what());
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(every_op_reads_its_autocast_entry) {
  for (const auto& c : all_op_cases()) {
    if (mg::amp::policy_is_fixed(c.op) || !c.check_low_precision || !c.reads_autocast_entry) continue;
    check_reads_policy(c);
  }
}

BOOST_AUTO_TEST_SUITE_END()
