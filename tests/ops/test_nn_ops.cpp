// Focused tests of the library-fused ops (matmul, linear, conv2d, pooling,
// batch_norm, softmax): error messages, batch_norm's running statistics and
// eval mode, and agreement of the oneDNN path with the built-in fallback on
// every registered case (forward and gradients), which the float64 gradient
// check alone cannot show: float64 always runs the fallback.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

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
  BOOST_TEST(y == (std::vector<double>{1 - 2 + 1.5, 0 + 4 + 3, 4 - 5 + 3, 0 + 10 + 6}),
             boost::test_tools::per_element());
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
  expect_error_naming<mg::DTypeError>(
      [] {
        F::matmul(mg::zeros({2, 3}, DType::int32), mg::zeros({3, 2}, DType::int32));
      },
      "matmul");
  try {
    F::matmul(mg::zeros({2, 3}), mg::zeros({4, 2}));
  } catch (const mg::ShapeError& e) {
    BOOST_TEST(std::string(e.what()).find("float32[2, 3]") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_CASE(linear_errors_name_the_op) {
  expect_error_naming<mg::ShapeError>([] { F::linear(mg::zeros({2, 3}), mg::zeros({4, 2})); }, "linear");
  expect_error_naming<mg::ShapeError>(
      [] {
        F::linear(mg::zeros({2, 3}), mg::zeros({4, 3}), mg::zeros({3}));
      },
      "linear");
  expect_error_naming<mg::DTypeError>(
      [] { F::linear(mg::zeros({2, 3}), mg::zeros({4, 3}, DType::bfloat16)); }, "linear");
}

// ---- conv2d -------------------------------------------------------------------

namespace {

// Direct convolution in double, written from the definition.
std::vector<double> conv_reference(const Tensor& x, const Tensor& w, const Tensor& b, const F::Conv2dOptions& o,
                                   mg::Shape& out_shape) {
  const auto xv = x.to_vector<double>(), wv = w.to_vector<double>();
  const auto bv = b.defined() ? b.to_vector<double>() : std::vector<double>();
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3);
  const int64_t oc = w.size(0), cg = w.size(1), kh = w.size(2), kw = w.size(3), og = oc / o.groups;
  const int64_t oh = (h + 2 * o.padding.h - o.dilation.h * (kh - 1) - 1) / o.stride.h + 1;
  const int64_t ow = (wd + 2 * o.padding.w - o.dilation.w * (kw - 1) - 1) / o.stride.w + 1;
  out_shape = mg::Shape{n, oc, oh, ow};
  std::vector<double> y(static_cast<size_t>(n * oc * oh * ow));
  for (int64_t in = 0; in < n; ++in)
    for (int64_t co = 0; co < oc; ++co)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double acc = bv.empty() ? 0.0 : bv[co];
          const int64_t g = co / og;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t p = 0; p < kh; ++p)
              for (int64_t q = 0; q < kw; ++q) {
                const int64_t r = i * o.stride.h - o.padding.h + p * o.dilation.h;
                const int64_t s = j * o.stride.w - o.padding.w + q * o.dilation.w;
                if (r < 0 || r >= h || s < 0 || s >= wd) continue;
                acc += xv[((in * c + g * cg + ci) * h + r) * wd + s] * wv[((co * cg + ci) * kh + p) * kw + q];
              }
          y[((in * oc + co) * oh + i) * ow + j] = acc;
        }
  return y;
}

void expect_conv_matches_reference(mg::Shape xs, mg::Shape ws, bool bias, F::Conv2dOptions o) {
  namespace dnn = mg::backend::onednn;
  mg::manual_seed(3);
  const Tensor x = mg::uniform(xs, -1, 1), w = mg::uniform(ws, -1, 1),
               b = bias ? mg::uniform({ws[0]}, -1, 1) : Tensor();
  mg::Shape out_shape;
  const auto want = conv_reference(x, w, b, o, out_shape);
  for (dnn::Mode m : {dnn::Mode::always, dnn::Mode::never}) {
    dnn::ModeScope scope(m);
    const Tensor y = F::conv2d(x, w, b, o);
    BOOST_TEST_REQUIRE(y.shape() == out_shape);
    const auto got = y.to_vector<double>();
    for (size_t i = 0; i < got.size(); ++i)
      BOOST_TEST(std::abs(got[i] - want[i]) < 1e-5, "mode " << static_cast<int>(m) << " element " << i << ": " << got[i]
                                                             << " vs " << want[i]);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(conv2d_matches_direct_convolution) {
  expect_conv_matches_reference({2, 3, 5, 5}, {4, 3, 3, 3}, true, {});
  expect_conv_matches_reference({1, 2, 7, 6}, {3, 2, 3, 2}, true, {.stride = {2, 1}, .padding = {1, 0}});
  expect_conv_matches_reference({1, 2, 6, 7}, {2, 2, 2, 3}, false,
                                {.stride = {1, 2}, .padding = {0, 2}, .dilation = {2, 1}});
  expect_conv_matches_reference({2, 4, 5, 5}, {6, 2, 3, 3}, true, {.padding = 1, .groups = 2});
  expect_conv_matches_reference({1, 3, 5, 5}, {3, 1, 3, 3}, false, {.stride = 2, .padding = 1, .groups = 3});
  // Large enough to run oneDNN in the default mode too.
  expect_conv_matches_reference({2, 8, 12, 12}, {16, 8, 3, 3}, true, {.padding = 1});
}

BOOST_AUTO_TEST_CASE(conv2d_groups_keep_channels_apart) {
  // Group 0 sees only input channel 0, group 1 only channel 1.
  const Tensor x = F::concat({mg::ones({1, 1, 3, 3}), mg::zeros({1, 1, 3, 3})}, 1);
  const Tensor w = mg::ones({2, 1, 2, 2});
  const Tensor y = F::conv2d(x, w, Tensor(), {.groups = 2});
  BOOST_TEST(y.shape() == mg::Shape({1, 2, 2, 2}));
  for (double v : F::narrow(y, 1, 0, 1).to_vector<double>()) BOOST_TEST(v == 4.0);
  for (double v : F::narrow(y, 1, 1, 1).to_vector<double>()) BOOST_TEST(v == 0.0);
}

BOOST_AUTO_TEST_CASE(conv2d_errors_name_the_op) {
  expect_error_naming<mg::ShapeError>([] { F::conv2d(mg::zeros({1, 3, 5, 5}), mg::zeros({4, 2, 3, 3})); }, "conv2d");
  expect_error_naming<mg::ShapeError>(
      [] { F::conv2d(mg::zeros({1, 4, 5, 5}), mg::zeros({3, 2, 3, 3}), Tensor(), {.groups = 2}); }, "conv2d");
  expect_error_naming<mg::ShapeError>([] { F::conv2d(mg::zeros({1, 3, 2, 2}), mg::zeros({4, 3, 3, 3})); }, "conv2d");
  expect_error_naming<mg::ShapeError>([] { F::conv2d(mg::zeros({3, 5, 5}), mg::zeros({4, 3, 3, 3})); }, "conv2d");
  expect_error_naming<mg::ShapeError>(
      [] { F::conv2d(mg::zeros({1, 3, 5, 5}), mg::zeros({4, 3, 3, 3}), Tensor(), {.stride = 0}); }, "conv2d");
  expect_error_naming<mg::ShapeError>(
      [] { F::conv2d(mg::zeros({1, 3, 5, 5}), mg::zeros({4, 3, 3, 3}), mg::zeros({3})); }, "conv2d");
  expect_error_naming<mg::DTypeError>(
      [] { F::conv2d(mg::zeros({1, 3, 5, 5}), mg::zeros({4, 3, 3, 3}, DType::bfloat16)); }, "conv2d");
}

// ---- pooling ------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(pooling_known_values) {
  namespace dnn = mg::backend::onednn;
  for (dnn::Mode m : {dnn::Mode::always, dnn::Mode::never}) {
    dnn::ModeScope scope(m);
    const Tensor x = F::reshape(mg::arange(0.0, 16.0), {1, 1, 4, 4});
    BOOST_TEST(F::max_pool2d(x, {.kernel_size = 2}).to_vector<double>() == (std::vector<double>{5, 7, 13, 15}),
               boost::test_tools::per_element());
    BOOST_TEST(F::avg_pool2d(x, {.kernel_size = 2}).to_vector<double>() == (std::vector<double>{2.5, 4.5, 10.5, 12.5}),
               boost::test_tools::per_element());
    // Padding is not counted: a window of ones averages to one at the border too.
    for (double v :
         F::avg_pool2d(mg::ones({1, 2, 5, 5}), {.kernel_size = 3, .stride = 2, .padding = 1}).to_vector<double>())
      BOOST_TEST(v == 1.0);
    // Corner window [0,1]x[0,1] of rows 0..1 and columns 0..1: (0 + 1 + 4 + 5) / 4.
    BOOST_TEST(F::avg_pool2d(x, {.kernel_size = 3, .stride = 2, .padding = 1}).at<double>({0, 0, 0, 0}) == 2.5);
    // Max pooling with padding: padded positions never win, even over negatives.
    const Tensor neg = mg::full({1, 1, 2, 2}, -3.0);
    for (double v : F::max_pool2d(neg, {.kernel_size = 2, .stride = 1, .padding = 1}).to_vector<double>())
      BOOST_TEST(v == -3.0);
    // Adaptive windows [floor(i*5/3), ceil((i+1)*5/3)): rows {0,1}, {1,2,3}, {3,4}.
    const Tensor col = F::reshape(mg::arange(0.0, 5.0), {1, 1, 5, 1});
    BOOST_TEST(F::adaptive_avg_pool2d(col, {3, 1}).to_vector<double>() == (std::vector<double>{0.5, 2.0, 3.5}),
               boost::test_tools::per_element());
    BOOST_TEST(F::adaptive_avg_pool2d(x, 1).item<double>() == 7.5);
  }
}

BOOST_AUTO_TEST_CASE(max_pool_gradient_follows_its_forward_path) {
  // The forward's workspace decides the backward path, whatever the mode is
  // when the gradient is computed.
  namespace dnn = mg::backend::onednn;
  mg::manual_seed(5);
  const Tensor x0 = mg::uniform({2, 3, 6, 6}, -1, 1);
  auto grad_with = [&](dnn::Mode forward_mode, dnn::Mode backward_mode) {
    Tensor x = x0.clone();
    mg::autodiff::GradManager gm;
    gm.attach(x);
    auto rec = gm.record();
    Tensor y;
    {
      dnn::ModeScope scope(forward_mode);
      y = F::max_pool2d(x, {.kernel_size = 3, .stride = 2, .padding = 1});
    }
    dnn::ModeScope scope(backward_mode);
    gm.backward(y, mg::ones_like(y));
    return x.grad().to_vector<double>();
  };
  const auto ref = grad_with(dnn::Mode::never, dnn::Mode::never);
  BOOST_TEST(grad_with(dnn::Mode::always, dnn::Mode::never) == ref, boost::test_tools::per_element());
  BOOST_TEST(grad_with(dnn::Mode::never, dnn::Mode::always) == ref, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(pooling_errors_name_the_op) {
  expect_error_naming<mg::ShapeError>([] { F::max_pool2d(mg::zeros({1, 4, 4}), {.kernel_size = 2}); }, "max_pool2d");
  expect_error_naming<mg::ShapeError>(
      [] { F::max_pool2d(mg::zeros({1, 1, 4, 4}), {.kernel_size = 2, .padding = 2}); }, "max_pool2d");
  expect_error_naming<mg::ShapeError>([] { F::avg_pool2d(mg::zeros({1, 1, 2, 2}), {.kernel_size = 3}); }, "avg_pool2d");
  expect_error_naming<mg::ShapeError>([] { F::adaptive_avg_pool2d(mg::zeros({1, 1, 2, 2}), {0, 1}); },
                                      "adaptive_avg_pool2d");
  expect_error_naming<mg::DTypeError>([] { F::avg_pool2d(mg::zeros({1, 1, 2, 2}, DType::int32)); }, "avg_pool2d");
}

// ---- batch_norm ---------------------------------------------------------------

namespace {

// Per-channel mean and biased variance of x [N, C, ...], from the definition.
void channel_stats(const Tensor& x, std::vector<double>& mean, std::vector<double>& var) {
  const auto v = x.to_vector<double>();
  const int64_t n = x.size(0), c = x.size(1), s = x.numel() / (n * c);
  mean.assign(c, 0.0);
  var.assign(c, 0.0);
  for (int64_t ci = 0; ci < c; ++ci) {
    for (int64_t ni = 0; ni < n; ++ni)
      for (int64_t i = 0; i < s; ++i) mean[ci] += v[(ni * c + ci) * s + i];
    mean[ci] /= static_cast<double>(n * s);
    for (int64_t ni = 0; ni < n; ++ni)
      for (int64_t i = 0; i < s; ++i) var[ci] += std::pow(v[(ni * c + ci) * s + i] - mean[ci], 2);
    var[ci] /= static_cast<double>(n * s);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(batch_norm_training_updates_running_stats_with_unbiased_variance) {
  for (DType dt : {DType::float32, DType::bfloat16, DType::float16}) {
    BOOST_TEST_CONTEXT("dtype " << dt) {
      mg::manual_seed(11);
      const Tensor x = mg::uniform({4, 3, 2, 2}, -2, 3, dt);
      Tensor rm = mg::full({3}, 0.5), rv = mg::full({3}, 2.0);
      const uint64_t version = rm.version();
      const Tensor w = mg::uniform({3}, 0.5, 1.5), b = mg::uniform({3}, -1, 1);
      const Tensor y = F::batch_norm(x, rm, rv, w, b, {.training = true, .momentum = 0.25});
      BOOST_TEST(y.dtype() == dt);
      BOOST_TEST(rm.dtype() == DType::float32);
      BOOST_TEST(rm.version() > version);
      std::vector<double> mean, var;
      channel_stats(x, mean, var);
      const double m16 = 16.0;
      for (int64_t c = 0; c < 3; ++c) {
        BOOST_TEST(std::abs(rm.at<double>({c}) - (0.75 * 0.5 + 0.25 * mean[c])) < 1e-5);
        BOOST_TEST(std::abs(rv.at<double>({c}) - (0.75 * 2.0 + 0.25 * var[c] * m16 / (m16 - 1))) < 1e-5);
      }
      // The output is normalised with the biased batch variance.
      const auto xv = x.to_vector<double>(), yv = y.to_vector<double>();
      const double tol = dt == DType::float32 ? 1e-5 : (dt == DType::bfloat16 ? 2e-2 : 3e-3);
      for (size_t i = 0; i < xv.size(); ++i) {
        const int64_t c = (static_cast<int64_t>(i) / 4) % 3;
        const double want = (xv[i] - mean[c]) / std::sqrt(var[c] + 1e-5) * w.at<double>({c}) + b.at<double>({c});
        BOOST_TEST(std::abs(yv[i] - want) <= tol * (1 + std::abs(want)), "element " << i);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(batch_norm_running_stats_of_any_floating_dtype_or_in_a_view_are_updated) {
  // float32 input, so float32 statistics; running statistics stored in
  // float64, bfloat16, and as float32 views into larger buffers.
  mg::manual_seed(14);
  const Tensor x = mg::uniform({5, 3, 4}, -1, 2);
  std::vector<double> mean, var;
  channel_stats(x, mean, var);
  const double correction = 20.0 / 19.0;  // 20 values per channel
  auto check = [&](const Tensor& rm, const Tensor& rv, double tol) {
    for (int64_t c = 0; c < 3; ++c) {
      BOOST_TEST(std::abs(rm.at<double>({c}) - (0.25 + 0.5 * mean[c])) < tol, "channel " << c);
      BOOST_TEST(std::abs(rv.at<double>({c}) - (1.0 + 0.5 * var[c] * correction)) < tol, "channel " << c);
    }
  };
  for (DType rd : {DType::float64, DType::bfloat16}) {
    BOOST_TEST_CONTEXT("running dtype " << rd) {
      Tensor rm = mg::full({3}, 0.5, rd), rv = mg::full({3}, 2.0, rd);
      (void)F::batch_norm(x, rm, rv, {}, {}, {.training = true, .momentum = 0.5});
      BOOST_TEST(rm.dtype() == rd);
      check(rm, rv, rd == DType::bfloat16 ? 2e-2 : 1e-6);
    }
  }
  // Views into the second row of [2, 3] buffers: the update writes there only.
  Tensor mean_buf = mg::full({2, 3}, 0.5), var_buf = mg::full({2, 3}, 2.0);
  Tensor rm = F::squeeze(F::narrow(mean_buf, 0, 1, 1), 0), rv = F::squeeze(F::narrow(var_buf, 0, 1, 1), 0);
  (void)F::batch_norm(x, rm, rv, {}, {}, {.training = true, .momentum = 0.5});
  check(rm, rv, 1e-6);
  check(F::narrow(mean_buf, 0, 1, 1).reshape({3}), F::narrow(var_buf, 0, 1, 1).reshape({3}), 1e-6);
  for (int64_t c = 0; c < 3; ++c) {
    BOOST_TEST(mean_buf.at<double>({0, c}) == 0.5);
    BOOST_TEST(var_buf.at<double>({0, c}) == 2.0);
  }
}

BOOST_AUTO_TEST_CASE(batch_norm_eval_uses_running_stats_and_leaves_them) {
  const Tensor x = mg::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f, 8.f}, {2, 2, 2});
  const Tensor rm = mg::tensor({1.f, -1.f}, {2}), rv = mg::tensor({4.f, 0.25f}, {2});
  const Tensor w = mg::tensor({2.f, 1.f}, {2}), b = mg::tensor({0.f, 10.f}, {2});
  const Tensor y = F::batch_norm(x, rm, rv, w, b, {.training = false, .eps = 0.0});
  // Channel 0: (x - 1) / 2 * 2 + 0; channel 1: (x + 1) / 0.5 * 1 + 10.
  const std::vector<double> want{0, 1, 18, 20, 4, 5, 26, 28};
  const auto got = y.to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) BOOST_TEST(std::abs(got[i] - want[i]) < 1e-5, "element " << i);
  BOOST_TEST(rm.to_vector<double>() == (std::vector<double>{1, -1}), boost::test_tools::per_element());
  BOOST_TEST(rv.to_vector<double>() == (std::vector<double>{4, 0.25}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(batch_norm_half_input_with_float32_params) {
  // Values near 1000 with a spread of about 1: float16 sums of 64 of them
  // would lose the mean; statistics in float32 keep it.
  mg::manual_seed(12);
  const Tensor x32 = mg::uniform({8, 2, 4, 2}, 999.0, 1001.0);
  const Tensor x16 = x32.to(DType::float16);
  Tensor w = mg::ones({2}), b = mg::zeros({2});
  Tensor rm = mg::zeros({2}), rv = mg::ones({2});
  mg::autodiff::GradManager gm;
  gm.attach(w).attach(b);
  Tensor x = x16.clone();
  gm.attach(x);
  Tensor y;
  {
    auto rec = gm.record();
    y = F::batch_norm(x, rm, rv, w, b, {.training = true, .momentum = 1.0});
    gm.backward(y, mg::ones_like(y));
  }
  BOOST_TEST(y.dtype() == DType::float16);
  BOOST_TEST(x.grad().dtype() == DType::float16);
  BOOST_TEST(w.grad().dtype() == DType::float32);
  BOOST_TEST(b.grad().dtype() == DType::float32);
  std::vector<double> mean, var;
  channel_stats(x16, mean, var);
  for (int64_t c = 0; c < 2; ++c) BOOST_TEST(std::abs(rm.at<double>({c}) - mean[c]) < 1e-3);
  // The output is standardised: per-channel mean ~0 and variance ~1.
  std::vector<double> ym, yvar;
  channel_stats(y, ym, yvar);
  for (int64_t c = 0; c < 2; ++c) {
    BOOST_TEST(std::abs(ym[c]) < 1e-2);
    BOOST_TEST(std::abs(yvar[c] - 1.0) < 2e-2);
    BOOST_TEST(std::abs(b.grad().at<double>({c}) - 64.0) < 1e-4);  // sum of ones over N*H*W
  }
}

BOOST_AUTO_TEST_CASE(batch_norm_errors_name_the_op_and_change_nothing) {
  Tensor rm = mg::zeros({3}), rv = mg::ones({3});
  const Tensor x = mg::uniform({2, 3, 2, 2});
  expect_error_naming<mg::StateError>([&] { F::batch_norm(x, Tensor(), Tensor()); }, "batch_norm");
  expect_error_naming<mg::ShapeError>([&] { F::batch_norm(x, rm, rv, mg::ones({4})); }, "batch_norm");
  expect_error_naming<mg::ShapeError>(
      [&] { F::batch_norm(x, mg::zeros({2}), mg::ones({2}), {}, {}, {.training = true}); }, "batch_norm");
  expect_error_naming<mg::ShapeError>(
      [&] { F::batch_norm(mg::uniform({1, 3}), rm, rv, {}, {}, {.training = true}); }, "batch_norm");
  expect_error_naming<mg::DTypeError>([&] { F::batch_norm(mg::zeros({2, 3}, DType::int32), rm, rv); }, "batch_norm");
  expect_error_naming<mg::ShapeError>([&] { F::batch_norm(mg::zeros({3}), rm, rv); }, "batch_norm");
  BOOST_TEST(rm.to_vector<double>() == (std::vector<double>{0, 0, 0}), boost::test_tools::per_element());
  BOOST_TEST(rv.to_vector<double>() == (std::vector<double>{1, 1, 1}), boost::test_tools::per_element());
}

// ---- softmax ------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(softmax_known_values) {
  namespace dnn = mg::backend::onednn;
  for (dnn::Mode m : {dnn::Mode::always, dnn::Mode::never}) {
    dnn::ModeScope scope(m);
    const Tensor x = mg::tensor({0.0f, std::log(2.0f), 5.0f, 5.0f}, {2, 2});
    const auto p = F::softmax(x, 1).to_vector<double>();
    const std::vector<double> want{1.0 / 3, 2.0 / 3, 0.5, 0.5};
    for (size_t i = 0; i < 4; ++i) BOOST_TEST(std::abs(p[i] - want[i]) < 1e-6);
    // oneDNN's log is good to a few float32 ulps (about 2e-6 here).
    const auto lp = F::log_softmax(x, 1).to_vector<double>();
    for (size_t i = 0; i < 4; ++i) BOOST_TEST(std::abs(lp[i] - std::log(want[i])) < 1e-5);
    // Along axis 0 of the same tensor: columns (0, 5) and (ln 2, 5).
    const auto q = F::softmax(x, 0).to_vector<double>();
    BOOST_TEST(std::abs(q[0] - 1.0 / (1.0 + std::exp(5.0))) < 1e-6);
    BOOST_TEST(std::abs(q[0] + q[2] - 1.0) < 1e-6);
    // Large logits do not overflow.
    const auto big = F::softmax(mg::tensor({1000.f, 1000.f}, {2}), 0).to_vector<double>();
    BOOST_TEST(std::abs(big[0] - 0.5) < 1e-6);
  }
}

// Along a strided axis the built-in loops run (oneDNN only takes the last
// one), vectorised over the inner positions: an inner extent of 37 leaves
// full vectors of every width and a tail. Forward and backward of softmax
// and log_softmax in float32 and float64 against the formulas evaluated
// here in double; a -inf logit (a masked class) gives probability 0 and
// log-probability -inf.
BOOST_AUTO_TEST_CASE(softmax_along_a_strided_axis_matches_the_formula_at_every_vector_width) {
  constexpr int64_t N = 3, C = 7, I = 37;
  mg::manual_seed(5);
  std::vector<float> xv = mg::uniform({N, C, I}, -30.0, 30.0).to_vector<float>();
  xv[1 * I + 4] = -std::numeric_limits<float>::infinity();  // sample 0, class 1, position 4
  const std::vector<float> gv = mg::uniform({N, C, I}, -1.0, 1.0).to_vector<float>();
  // The reference: p = e^(x - max) / sum, log p = x - max - log sum, and the
  // gradients p (g - sum_c g p) and g - p sum_c g.
  std::vector<double> p(xv.size()), logp(xv.size()), gsm(xv.size()), glsm(xv.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < I; ++i) {
      auto at = [&](int64_t c) { return static_cast<size_t>((n * C + c) * I + i); };
      double m = -std::numeric_limits<double>::infinity(), sum = 0, gp = 0, gsum = 0;
      for (int64_t c = 0; c < C; ++c) m = std::max(m, static_cast<double>(xv[at(c)]));
      for (int64_t c = 0; c < C; ++c) sum += std::exp(xv[at(c)] - m);
      for (int64_t c = 0; c < C; ++c) {
        p[at(c)] = std::exp(xv[at(c)] - m) / sum;
        logp[at(c)] = xv[at(c)] - m - std::log(sum);
        gp += gv[at(c)] * p[at(c)];
        gsum += gv[at(c)];
      }
      for (int64_t c = 0; c < C; ++c) {
        gsm[at(c)] = p[at(c)] * (gv[at(c)] - gp);
        glsm[at(c)] = gv[at(c)] - p[at(c)] * gsum;
      }
    }
  for (DType dt : {DType::float32, DType::float64})
    for (bool log : {false, true}) {
      Tensor x = F::astype(mg::tensor(xv, {N, C, I}), dt).clone();  // a leaf of its own
      mg::autodiff::GradManager gm;
      gm.attach(x);
      auto rec = gm.record();
      const Tensor out = log ? F::log_softmax(x, 1) : F::softmax(x, 1);
      gm.backward(out, F::astype(mg::tensor(gv, {N, C, I}), dt));
      const std::vector<double> y = out.to_vector<double>(), gx = x.grad().to_vector<double>();
      const std::vector<double>& want = log ? logp : p;
      const std::vector<double>& want_g = log ? glsm : gsm;
      for (size_t k = 0; k < y.size(); ++k) {
        if (std::isinf(want[k]))
          BOOST_TEST(y[k] == want[k], "log_softmax of -inf at " << k);
        else
          BOOST_TEST(
              std::abs(y[k] - want[k]) <= 2e-6 * std::max(1.0, std::abs(want[k])),
              to_string(dt) << (log ? " log_softmax" : " softmax") << " at " << k << ": " << y[k] << " vs " << want[k]);
        BOOST_TEST(std::abs(gx[k] - want_g[k]) <= 1e-5 * std::max(1.0, std::abs(want_g[k])),
                   to_string(dt) << (log ? " log_softmax" : " softmax") << " gradient at " << k);
      }
      if (!log) BOOST_TEST(y[1 * I + 4] == 0.0);
    }
}

BOOST_AUTO_TEST_CASE(softmax_errors_name_the_op) {
  expect_error_naming<mg::ShapeError>([] { F::softmax(mg::zeros({2, 3}), 2); }, "softmax");
  expect_error_naming<mg::ShapeError>([] { F::log_softmax(mg::zeros({2, 3}), -3); }, "log_softmax");
  expect_error_naming<mg::DTypeError>([] { F::softmax(mg::zeros({2, 3}, DType::int64)); }, "softmax");
}

// ---- primitive cache and autocast ---------------------------------------------

BOOST_AUTO_TEST_CASE(a_training_loop_builds_its_primitives_once) {
  namespace dnn = mg::backend::onednn;
  if (!dnn::built()) return;
  mg::manual_seed(13);
  Tensor w = mg::uniform({8, 4, 3, 3}, -0.2, 0.2), fc = mg::uniform({10, 8 * 4 * 4}, -0.1, 0.1);
  const Tensor x = mg::uniform({16, 4, 8, 8}, -1, 1);
  Tensor rm = mg::zeros({8}), rv = mg::ones({8});
  auto step = [&] {
    mg::autodiff::GradManager gm;
    gm.attach(w).attach(fc);
    auto rec = gm.record();
    Tensor h = F::conv2d(x, w, Tensor(), {.padding = 1});
    h = F::batch_norm(h, rm, rv, {}, {}, {.training = true});
    h = F::max_pool2d(h, {.kernel_size = 2});
    Tensor y = F::log_softmax(F::linear(F::flatten(h, 1), fc), 1);
    gm.backward(y, mg::ones_like(y));
  };
  step();
  const int64_t after_first = dnn::primitives_created();
  BOOST_TEST(after_first > 0);
  step();
  step();
  BOOST_TEST(dnn::primitives_created() == after_first);
}

BOOST_AUTO_TEST_CASE(autocast_runs_products_low_and_softmax_high) {
  mg::manual_seed(14);
  Tensor x = mg::uniform({2, 3, 6, 6}, -1, 1), w = mg::uniform({4, 3, 3, 3}, -0.3, 0.3);
  Tensor fc = mg::uniform({5, 16}, -0.3, 0.3);
  mg::autodiff::GradManager gm;
  gm.attach(w).attach(fc);
  Tensor h, y;
  {
    mg::amp::autocast scope(true, DType::bfloat16);
    auto rec = gm.record();
    h = F::conv2d(x, w);                                    // low
    BOOST_TEST(h.dtype() == DType::bfloat16);
    BOOST_TEST(F::max_pool2d(h).dtype() == DType::bfloat16);  // keep
    Tensor p = F::adaptive_avg_pool2d(h, 2);                // keep
    BOOST_TEST(p.dtype() == DType::bfloat16);
    Tensor z = F::linear(F::flatten(p, 1), fc);             // low
    BOOST_TEST(z.dtype() == DType::bfloat16);
    y = F::softmax(z, 1);                                   // high
    BOOST_TEST(y.dtype() == DType::float32);
    gm.backward(y, mg::ones_like(y));
  }
  BOOST_TEST(w.grad().dtype() == DType::float32);
  BOOST_TEST(fc.grad().dtype() == DType::float32);
}

BOOST_AUTO_TEST_CASE(matmul_broadcast_gradients_have_operand_shapes) {
  mg::manual_seed(15);
  Tensor a = mg::uniform({2, 1, 3, 4}, -1, 1), b = mg::uniform({5, 4, 6}, -1, 1), v = mg::uniform({4}, -1, 1);
  mg::autodiff::GradManager gm;
  gm.attach(a).attach(b).attach(v);
  {
    auto rec = gm.record();
    Tensor y = F::matmul(a, b);
    gm.backward(y, mg::ones_like(y));
  }
  BOOST_TEST(a.grad().shape() == a.shape());
  BOOST_TEST(b.grad().shape() == b.shape());
  // d/da of sum(a·b) = ones · bᵀ summed over the broadcast batch: element (0,0,i,k) = Σ_b Σ_n b[b,k,n].
  const auto bv = b.to_vector<double>();
  double want = 0;
  for (int64_t bi = 0; bi < 5; ++bi)
    for (int64_t n = 0; n < 6; ++n) want += bv[(bi * 4 + 0) * 6 + n];
  BOOST_TEST(std::abs(a.grad().at<double>({1, 0, 2, 0}) - want) < 1e-4);
  {
    auto rec = gm.record();
    Tensor y = F::matmul(F::reshape(a, {2, 3, 4}), v);
    gm.backward(y, mg::ones_like(y));
  }
  BOOST_TEST(v.grad().shape() == v.shape());
}

BOOST_AUTO_TEST_SUITE_END()
