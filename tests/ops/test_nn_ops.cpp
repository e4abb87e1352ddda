// Focused tests of the library-fused ops (matmul, linear, conv2d, pooling,
// batch_norm, softmax): error messages, batch_norm's running statistics and
// eval mode, and agreement of the oneDNN path with the built-in fallback on
// every registered case (forward and gradients), which the float64 gradient
// check alone cannot show: float64 always runs the fallback.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <string>

#include "backend/onednn/onednn.hpp"
#include "op_registry.hpp"

namespace {

using namespace optest;
using mg::DType;
using mg::Tensor;
namespace F = mg::F;

// Output and gradients of one case: inputs built in `dtype` from a fixed seed,
// every floating input attached, backward with fixed output weights.
struct RunResult {
  Tensor out;
  std::vector<Tensor> grads;
};

RunResult run_case(const OpCase& c, DType dtype) {
  Inputs xs;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    mg::manual_seed(1000 + i);
    const InputSpec& s = c.inputs[i];
    xs.push_back(s.make ? s.make(dtype) : mg::uniform(s.shape, s.low, s.high, dtype));
  }
  mg::autodiff::GradManager gm;
  for (size_t i = 0; i < xs.size(); ++i)
    if (c.inputs[i].differentiable && mg::is_floating_point(xs[i].dtype())) gm.attach(xs[i]);
  RunResult r;
  {
    auto rec = gm.record();
    r.out = c.run(xs);
    mg::manual_seed(7);
    gm.backward(r.out, mg::uniform(r.out.shape(), 0.5, 1.5, r.out.dtype()));
  }
  for (const Tensor& x : xs) r.grads.push_back(x.grad());
  return r;
}

void expect_close(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  BOOST_TEST_REQUIRE(a.defined() == b.defined(), what << ": defined in one path only");
  if (!a.defined()) return;
  BOOST_TEST_REQUIRE(a.shape() == b.shape(), what << ": shapes " << a.shape() << " vs " << b.shape());
  BOOST_TEST(a.dtype() == b.dtype(), what << ": dtypes " << a.dtype() << " vs " << b.dtype());
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  double scale = 0;
  for (double v : vb) scale = std::max(scale, std::abs(v));
  for (size_t k = 0; k < va.size(); ++k)
    BOOST_TEST(std::abs(va[k] - vb[k]) <= tol * (std::abs(vb[k]) + 0.1 * scale + 1e-6),
               what << " element " << k << ": oneDNN " << va[k] << " vs fallback " << vb[k]);
}

std::vector<OpCase> fused_cases() {
  auto all = linalg_cases();
  auto nn = nn_cases();
  all.insert(all.end(), nn.begin(), nn.end());
  return all;
}

// `tol` for outputs; gradients get `grad_factor` times more, as they pass
// through more rounded intermediates (softmax's backward reads the rounded
// output, a 16-bit gradient is rounded again before the next product).
void compare_paths(DType dtype, double tol, double grad_factor) {
  for (const auto& c : fused_cases()) {
    if (!c.check_gradient) continue;
    BOOST_TEST_CONTEXT("op case " << c.name << " in " << dtype) {
      RunResult fast;
      {
        mg::backend::onednn::ModeScope always(mg::backend::onednn::Mode::always);
        fast = run_case(c, dtype);
      }
      RunResult ref;
      {
        mg::backend::onednn::FallbackScope fallback;
        ref = run_case(c, dtype);
      }
      expect_close(fast.out, ref.out, tol, "output");
      for (size_t i = 0; i < fast.grads.size(); ++i)
        expect_close(fast.grads[i], ref.grads[i], tol * grad_factor * c.lowp_tolerance,
                     "gradient of input " + std::to_string(i));
    }
  }
}

template <class E>
void expect_error_naming(const std::function<void()>& f, const std::string& op) {
  try {
    f();
    BOOST_ERROR("no " << op << " error thrown");
  } catch (const E& e) {
    BOOST_TEST(std::string(e.what()).find(op) == 0u, "message does not start with the op: " << e.what());
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(nn_ops)

BOOST_AUTO_TEST_CASE(onednn_and_fallback_agree_in_float32) {
  if (!mg::backend::onednn::built()) return;
  // oneDNN's exp and its reduction order differ from libm and the loops in
  // the last bits; log_softmax's backward gy - exp(y)·Σgy then cancels.
  compare_paths(DType::float32, 5e-5, 1.0);
}

BOOST_AUTO_TEST_CASE(onednn_and_fallback_agree_in_bfloat16) {
  if (!mg::backend::onednn::built()) return;
  // Both paths accumulate in float32 but round intermediate results at
  // different points.
  compare_paths(DType::bfloat16, 2e-2, 3.0);
}

BOOST_AUTO_TEST_CASE(onednn_and_fallback_agree_in_float16) {
  if (!mg::backend::onednn::built()) return;
  compare_paths(DType::float16, 3e-3, 3.0);
}

BOOST_AUTO_TEST_CASE(mode_scopes_restore_the_mode) {
  namespace dnn = mg::backend::onednn;
  BOOST_TEST((dnn::mode() == (dnn::built() ? dnn::Mode::automatic : dnn::Mode::never)));
  {
    dnn::FallbackScope fallback;
    BOOST_TEST(!dnn::enabled());
    BOOST_TEST(!dnn::use_for(int64_t{1} << 40));
    {
      dnn::ModeScope always(dnn::Mode::always);
      BOOST_TEST(dnn::use_for(1) == dnn::built());
    }
    BOOST_TEST((dnn::mode() == dnn::Mode::never));
  }
  BOOST_TEST(dnn::enabled() == dnn::built());
  BOOST_TEST(!dnn::use_for(dnn::kMinWork - 1));
  BOOST_TEST(dnn::use_for(dnn::kMinWork) == dnn::built());
}

// ---- matmul / linear ----------------------------------------------------------

BOOST_AUTO_TEST_CASE(matmul_known_values) {
  const Tensor a = mg::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  const Tensor b = mg::tensor({1.f, 0.f, -1.f, 2.f, 0.5f, 1.f}, {3, 2});
  const auto y = F::matmul(a, b).to_vector<double>();
  BOOST_TEST(y == (std::vector<double>{1 - 2 + 1.5, 0 + 4 + 3, 4 - 5 + 3, 0 + 10 + 6}), boost::test_tools::per_element());
  const Tensor v = mg::tensor({1.f, 1.f, 1.f}, {3});
  BOOST_TEST(F::matmul(a, v).shape() == mg::Shape({2}));
  BOOST_TEST(F::matmul(v, b).shape() == mg::Shape({2}));
  BOOST_TEST(F::matmul(v, v).shape() == mg::Shape({}));
  BOOST_TEST(F::matmul(v, v).item<double>() == 3.0);
}

BOOST_AUTO_TEST_CASE(matmul_batch_broadcast_shapes) {
  const Tensor a = mg::uniform({2, 1, 3, 4});
  const Tensor b = mg::uniform({5, 4, 6});
  BOOST_TEST(F::matmul(a, b).shape() == mg::Shape({2, 5, 3, 6}));
  // Each output batch equals the 2-d product of its operands' batches.
  const Tensor y = F::matmul(a, b);
  const Tensor y11 = F::matmul(F::reshape(F::narrow(a, 0, 1, 1), {3, 4}), F::reshape(F::narrow(b, 0, 1, 1), {4, 6}));
  const auto got = F::reshape(F::narrow(F::narrow(y, 0, 1, 1), 1, 1, 1), {3, 6}).to_vector<double>();
  const auto want = y11.to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) BOOST_TEST(std::abs(got[i] - want[i]) < 1e-5);
}

BOOST_AUTO_TEST_CASE(matmul_errors_name_the_op) {
  expect_error_naming<mg::ShapeError>([] { F::matmul(mg::zeros({2, 3}), mg::zeros({4, 2})); }, "matmul");
  expect_error_naming<mg::ShapeError>([] { F::matmul(mg::zeros({2, 2, 3}), mg::zeros({3, 3, 2})); }, "matmul");
  expect_error_naming<mg::ShapeError>([] { F::matmul(mg::scalar(1.0), mg::zeros({2})); }, "matmul");
  expect_error_naming<mg::DTypeError>([] { F::matmul(mg::zeros({2, 3}), mg::zeros({3, 2}, DType::float64)); },
                                      "matmul");
  expect_error_naming<mg::DTypeError>([] { F::matmul(mg::zeros({2, 3}, DType::int32), mg::zeros({3, 2}, DType::int32)); },
                                      "matmul");
  try {
    F::matmul(mg::zeros({2, 3}), mg::zeros({4, 2}));
  } catch (const mg::ShapeError& e) {
    BOOST_TEST(std::string(e.what()).find("float32[2, 3]") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_CASE(linear_errors_name_the_op) {
  expect_error_naming<mg::ShapeError>([] { F::linear(mg::zeros({2, 3}), mg::zeros({4, 2})); }, "linear");
  expect_error_naming<mg::ShapeError>([] { F::linear(mg::zeros({2, 3}), mg::zeros({4, 3}), mg::zeros({3})); }, "linear");
  expect_error_naming<mg::DTypeError>(
      [] { F::linear(mg::zeros({2, 3}), mg::zeros({4, 3}, DType::bfloat16)); }, "linear");
}

BOOST_AUTO_TEST_SUITE_END()
