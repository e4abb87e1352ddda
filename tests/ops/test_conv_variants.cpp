// F::conv1d and F::conv_transpose2d: values against direct loops written from
// their definitions (on oneDNN and on the built-in kernels), conv_transpose2d
// as the adjoint of conv2d, autocast (ported from PyTorch's test_autocast.py,
// TestAutocastCPU.test_autocast_torch_bf16 over the CPU lower-precision list:
// conv1d, conv_transpose2d), and errors that name the op and its operands.
// The registry (cases_nn.cpp) checks their gradients in float64.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <vector>

#include "../common/test_util.hpp"
#include "backend/onednn/onednn.hpp"
#include "hooks/op_hooks.hpp"
#include "mixgrad/mixgrad.hpp"

namespace {

namespace mg = mixgrad;
namespace F = mg::F;
namespace dnn = mg::backend::onednn;
using mg::DType;
using mg::Tensor;

// y[n, g*og + o, i*s - p + k*d] += x[n, g*cg + c, i] * w[g*og + o ... ] read
// the other way round: the direct sum of conv1d.
std::vector<double> conv1d_reference(const Tensor& x, const Tensor& w, const Tensor& b, const F::Conv1dOptions& o,
                                     mg::Shape& out_shape) {
  const auto xv = x.to_vector<double>(), wv = w.to_vector<double>();
  const auto bv = b.defined() ? b.to_vector<double>() : std::vector<double>();
  const int64_t n = x.size(0), c = x.size(1), len = x.size(2);
  const int64_t oc = w.size(0), cg = w.size(1), k = w.size(2), og = oc / o.groups;
  const int64_t ol = (len + 2 * o.padding - o.dilation * (k - 1) - 1) / o.stride + 1;
  out_shape = mg::Shape{n, oc, ol};
  std::vector<double> y(static_cast<size_t>(n * oc * ol));
  for (int64_t in = 0; in < n; ++in)
    for (int64_t co = 0; co < oc; ++co)
      for (int64_t i = 0; i < ol; ++i) {
        double acc = bv.empty() ? 0.0 : bv[co];
        const int64_t g = co / og;
        for (int64_t ci = 0; ci < cg; ++ci)
          for (int64_t q = 0; q < k; ++q) {
            const int64_t r = i * o.stride - o.padding + q * o.dilation;
            if (r >= 0 && r < len) acc += xv[(in * c + g * cg + ci) * len + r] * wv[(co * cg + ci) * k + q];
          }
        y[(in * oc + co) * ol + i] = acc;
      }
  return y;
}

// Every input element scatters x * w over the output window it touches.
std::vector<double> conv_transpose2d_reference(const Tensor& x, const Tensor& w, const Tensor& b,
                                               const F::ConvTranspose2dOptions& o, mg::Shape& out_shape) {
  const auto xv = x.to_vector<double>(), wv = w.to_vector<double>();
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3);
  const int64_t og = w.size(1), kh = w.size(2), kw = w.size(3), cg = c / o.groups, oc = og * o.groups;
  const int64_t oh = (h - 1) * o.stride.h - 2 * o.padding.h + o.dilation.h * (kh - 1) + o.output_padding.h + 1;
  const int64_t ow = (wd - 1) * o.stride.w - 2 * o.padding.w + o.dilation.w * (kw - 1) + o.output_padding.w + 1;
  out_shape = mg::Shape{n, oc, oh, ow};
  std::vector<double> y(static_cast<size_t>(n * oc * oh * ow), 0.0);
  if (b.defined()) {
    const auto bv = b.to_vector<double>();
    for (int64_t in = 0; in < n; ++in)
      for (int64_t co = 0; co < oc; ++co)
        for (int64_t i = 0; i < oh * ow; ++i) y[static_cast<size_t>((in * oc + co) * oh * ow + i)] = bv[co];
  }
  for (int64_t in = 0; in < n; ++in)
    for (int64_t ci = 0; ci < c; ++ci)
      for (int64_t i = 0; i < h; ++i)
        for (int64_t j = 0; j < wd; ++j)
          for (int64_t o2 = 0; o2 < og; ++o2)
            for (int64_t p = 0; p < kh; ++p)
              for (int64_t q = 0; q < kw; ++q) {
                const int64_t r = i * o.stride.h - o.padding.h + p * o.dilation.h;
                const int64_t s = j * o.stride.w - o.padding.w + q * o.dilation.w;
                if (r < 0 || r >= oh || s < 0 || s >= ow) continue;
                const int64_t co = (ci / cg) * og + o2;
                y[((in * oc + co) * oh + r) * ow + s] +=
                    xv[((in * c + ci) * h + i) * wd + j] * wv[((ci * og + o2) * kh + p) * kw + q];
              }
  return y;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double tol, const char* what) {
  BOOST_TEST_REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i)
    BOOST_TEST(std::abs(got[i] - want[i]) < tol, what << " element " << i << ": " << got[i] << " vs " << want[i]);
}

void expect_conv1d(mg::Shape xs, mg::Shape ws, bool bias, F::Conv1dOptions o) {
  mg::manual_seed(5);
  const Tensor x = mg::uniform(xs, -1, 1), w = mg::uniform(ws, -1, 1),
               b = bias ? mg::uniform({ws[0]}, -1, 1) : Tensor();
  mg::Shape out_shape;
  const auto want = conv1d_reference(x, w, b, o, out_shape);
  for (dnn::Mode m : {dnn::Mode::always, dnn::Mode::never}) {
    dnn::ModeScope scope(m);
    const Tensor y = F::conv1d(x, w, b, o);
    BOOST_TEST_REQUIRE(y.shape() == out_shape);
    expect_close(y.to_vector<double>(), want, 1e-5, m == dnn::Mode::always ? "oneDNN" : "built-in");
  }
}

void expect_conv_transpose2d(mg::Shape xs, mg::Shape ws, bool bias, F::ConvTranspose2dOptions o) {
  mg::manual_seed(6);
  const Tensor x = mg::uniform(xs, -1, 1), w = mg::uniform(ws, -1, 1),
               b = bias ? mg::uniform({ws[1] * o.groups}, -1, 1) : Tensor();
  mg::Shape out_shape;
  const auto want = conv_transpose2d_reference(x, w, b, o, out_shape);
  for (dnn::Mode m : {dnn::Mode::always, dnn::Mode::never}) {
    dnn::ModeScope scope(m);
    const Tensor y = F::conv_transpose2d(x, w, b, o);
    BOOST_TEST_REQUIRE(y.shape() == out_shape);
    expect_close(y.to_vector<double>(), want, 1e-5, m == dnn::Mode::always ? "oneDNN" : "built-in");
  }
}

double dot(const Tensor& a, const Tensor& b) {
  const auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < av.size(); ++i) s += av[i] * bv[i];
  return s;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(conv_variants)

BOOST_AUTO_TEST_CASE(conv1d_matches_direct_convolution) {
  expect_conv1d({2, 3, 9}, {4, 3, 3}, true, {});
  expect_conv1d({1, 2, 10}, {3, 2, 4}, true, {.stride = 3, .padding = 2});
  expect_conv1d({1, 2, 11}, {2, 2, 3}, false, {.padding = 1, .dilation = 2});
  expect_conv1d({2, 6, 7}, {4, 3, 3}, true, {.padding = 1, .groups = 2});
  // Large enough to run oneDNN in the default mode too.
  expect_conv1d({4, 16, 64}, {32, 16, 5}, true, {.padding = 2});
}

BOOST_AUTO_TEST_CASE(conv_transpose2d_matches_direct_scatter) {
  expect_conv_transpose2d({2, 3, 3, 3}, {3, 2, 3, 3}, true, {});
  expect_conv_transpose2d({1, 2, 3, 4}, {2, 3, 3, 3}, true, {.stride = 2, .padding = 1, .output_padding = 1});
  expect_conv_transpose2d({1, 2, 4, 3}, {2, 2, 2, 3}, false,
                          {.stride = {3, 2}, .padding = {0, 1}, .output_padding = {2, 0}, .dilation = {2, 1}});
  expect_conv_transpose2d({2, 4, 3, 3}, {4, 3, 3, 3}, true, {.stride = 2, .padding = 1, .groups = 2});
  // A decoder's 4x4 / stride-2 upsampling, large enough for oneDNN by default.
  expect_conv_transpose2d({2, 16, 8, 8}, {16, 8, 4, 4}, true, {.stride = 2, .padding = 1});
}

// <conv2d(u, w), v> == <u, conv_transpose2d(v, w)> for every u, v: the
// defining property, with conv2d's own (separately tested) kernels.
BOOST_AUTO_TEST_CASE(conv_transpose2d_is_the_adjoint_of_conv2d) {
  mg::manual_seed(8);
  const F::Conv2dOptions c{.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}, .groups = 2};
  const Tensor u = mg::uniform({2, 4, 7, 8}, -1, 1, DType::float64);
  const Tensor w = mg::uniform({6, 2, 3, 3}, -1, 1, DType::float64);
  const Tensor cu = F::conv2d(u, w, Tensor(), c);
  const Tensor v = mg::uniform(cu.shape(), -1, 1, DType::float64);
  // conv2d maps height 7 to 4 with stride 2: 7 and 8 both map to 4, and
  // output_padding 0 picks 7.
  const Tensor tv = F::conv_transpose2d(
      v, w, Tensor(), {.stride = c.stride, .padding = c.padding, .dilation = c.dilation, .groups = c.groups});
  BOOST_TEST_REQUIRE(tv.shape() == u.shape());
  BOOST_TEST(std::abs(dot(cu, v) - dot(u, tv)) < 1e-10);
  // output_padding 1 picks 8.
  const Tensor u8 = mg::uniform({2, 4, 8, 8}, -1, 1, DType::float64);
  const Tensor tv8 = F::conv_transpose2d(v, w, Tensor(),
                                         {.stride = c.stride, .padding = c.padding, .output_padding = {1, 0},
                                          .dilation = c.dilation, .groups = c.groups});
  BOOST_TEST_REQUIRE(tv8.shape() == u8.shape());
  BOOST_TEST(std::abs(dot(F::conv2d(u8, w, Tensor(), c), v) - dot(u8, tv8)) < 1e-10);
}

// PyTorch test_autocast.py (TestAutocastCPU.test_autocast_torch_bf16): each
// op of the CPU lower-precision list, given float32 inputs under autocast,
// returns bfloat16 and equals the op run on inputs cast by hand. The
// products round their float32 operands here on any CPU, as PyTorch's do;
// without 16-bit math mixgrad's read them as they are (test_cpu_capabilities).
BOOST_AUTO_TEST_CASE(autocast_runs_conv1d_and_conv_transpose2d_in_bfloat16) {
  mg::amp::detail::RoundedProducts rounded;
  mg::manual_seed(9);
  const Tensor x1 = mg::uniform({2, 4, 12}), w1 = mg::uniform({5, 4, 3}), b1 = mg::uniform({5});
  const Tensor x2 = mg::uniform({2, 4, 5, 5}), w2 = mg::uniform({4, 3, 3, 3}), b2 = mg::uniform({3});
  auto bf = [](const Tensor& t) { return t.to(DType::bfloat16); };
  const Tensor want1 = F::conv1d(bf(x1), bf(w1), bf(b1), {.padding = 1});
  const Tensor want2 = F::conv_transpose2d(bf(x2), bf(w2), bf(b2), {.stride = 2});
  Tensor got1, got2;
  {
    mg::amp::autocast scope;
    got1 = F::conv1d(x1, w1, b1, {.padding = 1});
    got2 = F::conv_transpose2d(x2, w2, b2, {.stride = 2});
  }
  BOOST_TEST(got1.dtype() == DType::bfloat16);
  BOOST_TEST(got2.dtype() == DType::bfloat16);
  BOOST_TEST(test_util::values(got1) == test_util::values(want1), boost::test_tools::per_element());
  BOOST_TEST(test_util::values(got2) == test_util::values(want2), boost::test_tools::per_element());
  // Outside autocast, mixed dtypes are an error naming the op.
  test_util::check_error<mg::DTypeError>([&] { F::conv1d(x1, bf(w1)); }, {"conv1d", "bfloat16[5, 4, 3]"});
  test_util::check_error<mg::DTypeError>([&] { F::conv_transpose2d(bf(x2), w2); },
                                         {"conv_transpose2d", "bfloat16[2, 4, 5, 5]"});
}

BOOST_AUTO_TEST_CASE(conv1d_errors_name_the_op_and_shapes) {
  using test_util::check_error;
  check_error<mg::ShapeError>([] { F::conv1d(mg::zeros({1, 3, 5, 5}), mg::zeros({4, 3, 3})); },
                              {"conv1d", "float32[1, 3, 5, 5]"});
  check_error<mg::ShapeError>([] { F::conv1d(mg::zeros({1, 3, 5}), mg::zeros({4, 2, 3})); },
                              {"conv1d", "float32[4, 2, 3]", "groups=1"});
  check_error<mg::ShapeError>([] { F::conv1d(mg::zeros({1, 3, 2}), mg::zeros({4, 3, 3})); },
                              {"conv1d", "larger than padded input"});
  check_error<mg::ShapeError>([] { F::conv1d(mg::zeros({1, 3, 5}), mg::zeros({4, 3, 3}), Tensor(), {.stride = 0}); },
                              {"conv1d", "stride 0"});
  check_error<mg::ShapeError>([] { F::conv1d(mg::zeros({1, 3, 5}), mg::zeros({4, 3, 3}), mg::zeros({3})); },
                              {"conv1d", "bias float32[3]"});
}

BOOST_AUTO_TEST_CASE(conv_transpose2d_errors_name_the_op_and_shapes) {
  using test_util::check_error;
  // PyTorch's weight layout is [C_in, C_out / groups, ...]: a conv2d-shaped weight does not fit.
  check_error<mg::ShapeError>([] { F::conv_transpose2d(mg::zeros({1, 3, 4, 4}), mg::zeros({2, 3, 3, 3})); },
                              {"conv_transpose2d", "float32[2, 3, 3, 3]", "groups=1"});
  check_error<mg::ShapeError>(
      [] { F::conv_transpose2d(mg::zeros({1, 3, 4, 4}), mg::zeros({3, 2, 3, 3}), Tensor(), {.groups = 2}); },
      {"conv_transpose2d", "groups=2"});
  check_error<mg::ShapeError>(
      [] {
        F::conv_transpose2d(mg::zeros({1, 3, 4, 4}), mg::zeros({3, 2, 3, 3}), Tensor(),
                            {.stride = 2, .output_padding = 2});
      },
      {"conv_transpose2d", "output_padding (2, 2)", "stride (2, 2)"});
  check_error<mg::ShapeError>(
      [] { F::conv_transpose2d(mg::zeros({1, 3, 1, 1}), mg::zeros({3, 2, 1, 1}), Tensor(), {.padding = 1}); },
      {"conv_transpose2d", "empty output"});
  check_error<mg::ShapeError>(
      [] { F::conv_transpose2d(mg::zeros({1, 3, 4, 4}), mg::zeros({3, 2, 3, 3}), mg::zeros({3})); },
      {"conv_transpose2d", "bias float32[3]"});
  check_error<mg::ShapeError>([] { F::conv_transpose2d(mg::zeros({3, 4, 4}), mg::zeros({3, 2, 3, 3})); },
                              {"conv_transpose2d", "float32[3, 4, 4]"});
}

// A failed call records nothing: the next backward sees only the good op.
BOOST_AUTO_TEST_CASE(failed_calls_leave_the_recording_unchanged) {
  const Tensor x = mg::ones({1, 2, 3, 3}), w = mg::ones({2, 1, 2, 2});
  mg::autodiff::GradManager gm;
  gm.attach(w);
  {
    auto rec = gm.record();
    BOOST_CHECK_THROW(F::conv_transpose2d(x, w, mg::zeros({5})), mg::ShapeError);
    const Tensor y = F::conv_transpose2d(x, w);
    BOOST_TEST(y.shape() == mg::Shape({1, 1, 4, 4}));
    gm.backward(F::sum(y));
  }
  // d(sum y) / dw[c, 0, p, q] = sum over the input of channel c = 9.
  BOOST_TEST(test_util::values(w.grad()) == std::vector<double>(8, 9.0), boost::test_tools::per_element());
}

// An input without channels: the output is the bias, and the bias gradient
// is dy summed per output channel although the weight gradient is empty (the
// CPU left it unwritten until the first GPU run compared it with cuDNN's).
BOOST_AUTO_TEST_CASE(an_input_without_channels_gives_the_bias_and_its_gradient) {
  for (DType dt : {DType::float64, DType::float32, DType::bfloat16}) {
    BOOST_TEST_CONTEXT("dtype " << dt) {
      const Tensor x = mg::zeros({2, 0, 4, 4}, dt), w = mg::zeros({3, 0, 3, 3}, dt);
      const Tensor b = mg::tensor<double>({0.5, -1.0, 2.0}, {3}).to(dt);
      const Tensor dy = mg::uniform({2, 3, 4, 4}, -1.0, 1.0).to(dt);
      mg::autodiff::GradManager gm;
      gm.attach({w, b});
      {
        auto rec = gm.record();
        const Tensor y = F::conv2d(x, w, b, {.padding = 1});
        BOOST_TEST(y.shape() == mg::Shape({2, 3, 4, 4}));
        BOOST_TEST(test_util::values(F::mean(y.to(DType::float64), {0, 2, 3})) == test_util::values(b.to(DType::float64)),
                   boost::test_tools::per_element());
        gm.backward(y, dy);
      }
      BOOST_TEST(w.grad().shape() == w.shape());
      const auto want = test_util::values(F::sum(dy.to(DType::float64), {0, 2, 3}));
      const auto got = test_util::values(b.grad().to(DType::float64));
      const double tol = dt == DType::bfloat16 ? 0.1 : 1e-5;
      BOOST_REQUIRE_EQUAL(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) BOOST_TEST(std::fabs(got[i] - want[i]) <= tol, "channel " << i);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
