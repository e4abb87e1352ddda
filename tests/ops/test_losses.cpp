// Focused tests of the losses: values from their definitions (computed
// here, naively, in double), reductions and shapes, numerical stability, and
// errors that change nothing.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "autodiff/inspect.hpp"
#include "core/simd.hpp"
#include "mixgrad/mixgrad.hpp"
#include "../common/test_util.hpp"

namespace {

using test_util::values;
using test_util::message_has;

namespace mg = mixgrad;
namespace F = mixgrad::F;
using mg::Reduction;

// -log softmax(row)[label] with smoothing s, straight from the definition.
double reference_cross_entropy(const std::vector<double>& row, int64_t label, double s = 0.0) {
  const double c = static_cast<double>(row.size());
  double z = 0;
  for (double v : row) z += std::exp(v);
  double loss = 0;
  for (size_t j = 0; j < row.size(); ++j) {
    const double q = (static_cast<int64_t>(j) == label ? 1.0 - s : 0.0) + s / c;
    loss -= q * std::log(std::exp(row[j]) / z);
  }
  return loss;
}

std::vector<double> row_of(const std::vector<double>& m, int64_t r, int64_t cols) {
  return {m.begin() + r * cols, m.begin() + (r + 1) * cols};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(losses)

// ---- cross-entropy ---------------------------------------------------------

BOOST_AUTO_TEST_CASE(cross_entropy_of_uniform_logits_is_log_classes) {
  const auto logits = mg::zeros({3, 7});
  const auto labels = mg::tensor<int64_t>({0, 3, 6}, {3});
  BOOST_TEST(F::cross_entropy(logits, labels).item<double>() == std::log(7.0), boost::test_tools::tolerance(1e-6));
  BOOST_TEST(F::cross_entropy(logits, labels, {.reduction = Reduction::sum}).item<double>() == 3 * std::log(7.0),
             boost::test_tools::tolerance(1e-6));
  const auto none = F::cross_entropy(logits, labels, {.reduction = Reduction::none});
  BOOST_TEST(none.shape() == mg::Shape({3}));
  for (double v : values(none)) BOOST_TEST(v == std::log(7.0), boost::test_tools::tolerance(1e-6));
}

BOOST_AUTO_TEST_CASE(cross_entropy_matches_definition_with_and_without_smoothing) {
  mg::manual_seed(11);
  const auto logits = mg::uniform({4, 5}, -3, 3, mg::DType::float64);
  const std::vector<int64_t> y = {1, 4, 0, 2};
  const auto labels = mg::tensor<int64_t>(y, {4});
  const auto x = values(logits);
  for (double s : {0.0, 0.25}) {
    const auto per = values(F::cross_entropy(logits, labels, {.reduction = Reduction::none, .label_smoothing = s}));
    double mean = 0;
    for (int64_t i = 0; i < 4; ++i) {
      const double want = reference_cross_entropy(row_of(x, i, 5), y[i], s);
      BOOST_TEST(per[i] == want, boost::test_tools::tolerance(1e-12));
      mean += want / 4;
    }
    BOOST_TEST(F::cross_entropy(logits, labels, {.label_smoothing = s}).item<double>() == mean,
               boost::test_tools::tolerance(1e-12));
  }
}

BOOST_AUTO_TEST_CASE(cross_entropy_is_stable_for_huge_logits) {
  const auto logits = mg::tensor<float>({1000.f, 0.f, -1000.f, 0.f, 1000.f, 999.f}, {2, 3});
  const auto labels = mg::tensor<int64_t>({1, 2}, {2});
  const auto per = values(F::cross_entropy(logits, labels, {.reduction = Reduction::none}));
  BOOST_TEST(per[0] == 1000.0, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(per[1] == std::log1p(std::exp(1.0)), boost::test_tools::tolerance(1e-5));  // log(e + 1) - 0 shifted by 999

  mg::Tensor x = logits.clone();
  mg::autodiff::GradManager gm;
  gm.attach(x);
  {
    auto rec = gm.record();
    gm.backward(F::cross_entropy(x, labels, {.reduction = Reduction::sum}));
  }
  for (double g : values(x.grad())) BOOST_TEST(std::isfinite(g));
  BOOST_TEST(x.grad().at<double>({0, 0}) == 1.0, boost::test_tools::tolerance(1e-6));   // softmax ~ 1
  BOOST_TEST(x.grad().at<double>({0, 1}) == -1.0, boost::test_tools::tolerance(1e-6));  // ~0 - 1
}

BOOST_AUTO_TEST_CASE(cross_entropy_backward_is_softmax_minus_onehot_over_n) {
  mg::manual_seed(5);
  mg::Tensor logits = mg::uniform({3, 4}, -2, 2, mg::DType::float64);
  const std::vector<int64_t> y = {3, 0, 1};
  const auto labels = mg::tensor<int64_t>(y, {3});
  mg::autodiff::GradManager gm;
  gm.attach(logits);
  {
    auto rec = gm.record();
    gm.backward(F::cross_entropy(logits, labels));
  }
  const auto x = values(logits);
  const auto g = values(logits.grad());
  for (int64_t i = 0; i < 3; ++i) {
    double z = 0;
    for (int64_t j = 0; j < 4; ++j) z += std::exp(x[i * 4 + j]);
    for (int64_t j = 0; j < 4; ++j) {
      const double want = (std::exp(x[i * 4 + j]) / z - (j == y[i] ? 1.0 : 0.0)) / 3.0;
      BOOST_TEST(g[i * 4 + j] == want, boost::test_tools::tolerance(1e-12));
    }
  }
}

BOOST_AUTO_TEST_CASE(cross_entropy_spatial_and_class_axis) {
  // [N=2, C=3, L=2]: sample (n, l) has logits x[n, :, l].
  mg::manual_seed(2);
  const auto logits = mg::uniform({2, 3, 2}, -2, 2, mg::DType::float64);
  const std::vector<int64_t> y = {2, 0, 1, 1};
  const auto labels = mg::tensor<int64_t>(y, {2, 2});
  const auto x = values(logits);
  const auto per = F::cross_entropy(logits, labels, {.reduction = Reduction::none});
  BOOST_TEST(per.shape() == mg::Shape({2, 2}));
  const auto got = values(per);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t l = 0; l < 2; ++l) {
      std::vector<double> row;
      for (int64_t c = 0; c < 3; ++c) row.push_back(x[(n * 3 + c) * 2 + l]);
      BOOST_TEST(got[n * 2 + l] == reference_cross_entropy(row, y[n * 2 + l]), boost::test_tools::tolerance(1e-12));
    }
  // The same samples with the classes last: axis = -1 on a transposed (strided) view.
  const auto moved = F::transpose(logits, 1, 2);  // [2, 2, 3]
  const auto again = F::cross_entropy(moved, labels, {.reduction = Reduction::none, .axis = -1});
  const auto again_v = values(again);
  for (size_t k = 0; k < got.size(); ++k) BOOST_TEST(again_v[k] == got[k], boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(cross_entropy_strided_class_axis_agrees_with_contiguous_rows) {
  // Classes in the middle with many positions after them (the tiled kernel,
  // vectorised over a tile's 64 positions: 150 leaves two full tiles and a
  // tail) against the same samples laid out as rows (the row kernel): values
  // and gradients, in float64 and float32.
  for (const mg::DType dt : {mg::DType::float64, mg::DType::float32}) {
    const double tol = dt == mg::DType::float64 ? 1e-13 : 2e-6;
    mg::manual_seed(13);
    const int64_t n = 2, c = 5, len = 150;
    mg::Tensor x = mg::uniform({n, c, len}, -3, 3, dt);
    mg::Tensor rows = F::transpose(x, 1, 2).contiguous().detach();  // [n, len, c]
    std::vector<int64_t> y(n * len);
    for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int64_t>((i * 7) % c);
    const auto labels = mg::tensor<int64_t>(y, {n, len});
    mg::manual_seed(14);
    const auto dy = mg::uniform({n, len}, 0.5, 1.5, dt);
    mg::autodiff::GradManager gm;
    gm.attach({x, rows});
    mg::Tensor a, b;
    {
      auto rec = gm.record();
      a = F::cross_entropy(x, labels, {.reduction = Reduction::none, .label_smoothing = 0.1});
      b = F::cross_entropy(rows, labels, {.reduction = Reduction::none, .label_smoothing = 0.1, .axis = 2});
      gm.backward({a, b}, {dy, dy});
    }
    BOOST_TEST(values(a) == values(b), boost::test_tools::tolerance(tol) << boost::test_tools::per_element());
    const auto rv = values(rows);
    const auto av = values(a);
    for (int64_t k : {0, 77, 299})
      BOOST_TEST(av[k] == reference_cross_entropy(row_of(rv, k, c), y[k], 0.1), boost::test_tools::tolerance(10 * tol));
    const auto gx = values(F::transpose(x.grad(), 1, 2));
    BOOST_TEST(gx == values(rows.grad()), boost::test_tools::tolerance(tol) << boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(cross_entropy_unbatched_and_int32_labels) {
  const auto row = mg::tensor<double>({0.5, -1.0, 2.0}, {3});
  const auto loss = F::cross_entropy(row, mg::tensor<int64_t>({2}, {}));
  BOOST_TEST(loss.ndim() == 0);
  BOOST_TEST(loss.item<double>() == reference_cross_entropy({0.5, -1.0, 2.0}, 2), boost::test_tools::tolerance(1e-12));
  const auto logits = mg::tensor<float>({0.1f, 0.2f, 0.3f, 0.4f, -0.5f, 0.6f}, {2, 3});
  const double a = F::cross_entropy(logits, mg::tensor<int64_t>({2, 0}, {2})).item<double>();
  const double b = F::cross_entropy(logits, mg::tensor<int32_t>({2, 0}, {2})).item<double>();
  BOOST_TEST(a == b);
}

BOOST_AUTO_TEST_CASE(cross_entropy_dtypes_and_autocast) {
  const auto labels = mg::tensor<int64_t>({1, 0}, {2});
  const auto x32 = mg::tensor<float>({0.1f, 0.9f, -0.3f, 0.4f}, {2, 2});
  const auto bf = x32.to(mg::DType::bfloat16);
  BOOST_TEST(F::cross_entropy(bf, labels).dtype() == mg::DType::bfloat16);
  BOOST_TEST(F::cross_entropy(x32.to(mg::DType::float64), labels).dtype() == mg::DType::float64);
  {
    mg::amp::autocast scope;  // losses run in high precision
    BOOST_TEST(F::cross_entropy(bf, labels).dtype() == mg::DType::float32);
    BOOST_TEST(F::mse_loss(bf, bf).dtype() == mg::DType::float32);
    BOOST_TEST(F::layer_norm(bf, {2}).dtype() == mg::DType::float32);
    BOOST_TEST(F::dropout(bf, 0.5).dtype() == mg::DType::bfloat16);  // keeps its dtype
  }
}

BOOST_AUTO_TEST_CASE(cross_entropy_errors_name_the_op_and_change_nothing) {
  mg::Tensor logits = mg::zeros({2, 5});
  mg::autodiff::GradManager gm;
  gm.attach(logits);
  auto rec = gm.record();
  try {
    F::cross_entropy(logits, mg::tensor<int64_t>({1, 5}, {2}));
    BOOST_FAIL("expected an error");
  } catch (const mg::ValueError& e) {
    BOOST_TEST(message_has(e, {"cross_entropy", "label 5", "5 classes"}), e.what());
  }
  try {
    F::nll_loss(logits, mg::tensor<int32_t>({-1, 0}, {2}));
    BOOST_FAIL("expected an error");
  } catch (const mg::ValueError& e) {
    BOOST_TEST(message_has(e, {"nll_loss", "label -1", "5 classes"}), e.what());
  }
  BOOST_CHECK_THROW(F::cross_entropy(logits, mg::tensor<int64_t>({1, 2, 3}, {3})), mg::ShapeError);
  BOOST_CHECK_THROW(F::cross_entropy(logits, mg::zeros({2})), mg::DTypeError);
  BOOST_CHECK_THROW(F::cross_entropy(mg::zeros({2, 5}, mg::DType::int64), mg::tensor<int64_t>({1, 2}, {2})),
                    mg::DTypeError);
  BOOST_CHECK_THROW(F::cross_entropy(logits, mg::tensor<int64_t>({1, 2}, {2}), {.label_smoothing = 1.5}), mg::ValueError);
  BOOST_CHECK_THROW(F::cross_entropy(logits, mg::tensor<int64_t>({1, 2}, {2}), {.axis = 2}), mg::ShapeError);
  // The failed calls left nothing on the tape: a good call still backpropagates to exactly its gradient.
  gm.backward(F::cross_entropy(logits, mg::tensor<int64_t>({0, 0}, {2}), {.reduction = Reduction::sum}));
  BOOST_TEST(logits.grad().at<double>({0, 0}) == 0.2 - 1.0, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(logits.grad().at<double>({1, 4}) == 0.2, boost::test_tools::tolerance(1e-6));
}

// The forward kernel checks the labels as it reads them: the first bad one
// in sample order is named with its index, on both of its loops (rows, and
// tiles of a class axis that is not last), whatever the thread count.
BOOST_AUTO_TEST_CASE(bad_label_in_the_middle_of_a_batch_is_named_with_its_index) {
  const auto rows = mg::zeros({6, 3});
  try {
    F::cross_entropy(rows, mg::tensor<int64_t>({0, 2, 1, 7, -4, 9}, {6}));
    BOOST_FAIL("expected an error");
  } catch (const mg::ValueError& e) {
    BOOST_TEST(message_has(e, {"cross_entropy: label 7 at index 3", "labels int64[6]", "input float32[6, 3]",
                               "3 classes", "0 <= label < 3"}),
               e.what());
  }
  // [N, C, L] with the bad label at sample (1, 2) of a [2, 4] label grid: index 6.
  const auto spatial = mg::zeros({2, 3, 4});
  try {
    F::cross_entropy(spatial, mg::tensor<int32_t>({0, 1, 2, 0, 1, 2, 3, 0}, {2, 4}));
    BOOST_FAIL("expected an error");
  } catch (const mg::ValueError& e) {
    BOOST_TEST(message_has(e, {"label 3 at index 6", "labels int32[2, 4]", "3 classes"}), e.what());
  }
  try {
    F::nll_loss(spatial, mg::tensor<int64_t>({0, 1, 2, 0, -1, 2, 1, 0}, {2, 4}), {.reduction = Reduction::none});
    BOOST_FAIL("expected an error");
  } catch (const mg::ValueError& e) {
    BOOST_TEST(message_has(e, {"nll_loss: label -1 at index 4", "3 classes"}), e.what());
  }
}

// A bad label leaves everything as it was: no tape entry, not even for the
// autocast cast of a bfloat16 input (made before the kernel sees the
// labels), no gradient, and the next good step is exact.
BOOST_AUTO_TEST_CASE(bad_label_changes_no_state_under_autocast_and_recording) {
  mg::Tensor w = mg::ones({3, 3});
  mg::autodiff::GradManager gm;
  gm.attach(w);
  const auto x = mg::tensor<float>({1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1}, {4, 3});
  const auto good = mg::tensor<int64_t>({0, 1, 2, 0}, {4});
  const auto bad = mg::tensor<int64_t>({0, 1, 3, 0}, {4});
  auto rec = gm.record();
  mg::amp::autocast scope(true, mg::DType::bfloat16);
  const auto logits = F::matmul(x.to(mg::DType::bfloat16), w.to(mg::DType::bfloat16));  // recorded, bfloat16
  const size_t before = mg::autodiff::detail::tape_size(gm);
  BOOST_CHECK_THROW(F::cross_entropy(logits, bad), mg::ValueError);
  BOOST_CHECK_THROW(F::nll_loss(logits, bad), mg::ValueError);
  BOOST_TEST(mg::autodiff::detail::tape_size(gm) == before);
  BOOST_TEST(!w.grad().defined());
  BOOST_TEST(bad.to_vector<int64_t>() == std::vector<int64_t>({0, 1, 3, 0}));
  // The loss of the good labels: the cast (1 node) and the loss (1 node) are recorded.
  const auto loss = F::cross_entropy(logits, good, {.reduction = Reduction::sum});
  BOOST_TEST(loss.dtype() == mg::DType::float32);
  BOOST_TEST(mg::autodiff::detail::tape_size(gm) == before + 2);
  gm.backward(loss);
  // All logits rows are (1, 0, 0)-like sums of w's rows = 1: softmax is uniform,
  // so d loss / d logits = 1/3 - onehot, and d/dw = x^T (1/3 - onehot).
  const auto gw = values(w.grad().to(mg::DType::float64));
  const std::vector<int64_t> lab{0, 1, 2, 0};
  const std::vector<double> xs{1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      double want = 0;
      for (int r = 0; r < 4; ++r) want += xs[r * 3 + i] * (1.0 / 3.0 - (lab[r] == j ? 1.0 : 0.0));
      BOOST_TEST(gw[i * 3 + j] == want, boost::test_tools::tolerance(1e-2));
    }
}

// ---- nll -------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(nll_loss_picks_minus_the_label_entry) {
  mg::Tensor lp = mg::tensor<double>({-0.5, -1.0, -2.0, -0.1, -3.0, -0.7}, {2, 3});
  const auto labels = mg::tensor<int64_t>({2, 0}, {2});
  BOOST_TEST(F::nll_loss(lp, labels).item<double>() == (2.0 + 0.1) / 2, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(F::nll_loss(lp, labels, {.reduction = Reduction::sum}).item<double>() == 2.1,
             boost::test_tools::tolerance(1e-12));
  const auto none = values(F::nll_loss(lp, labels, {.reduction = Reduction::none}));
  BOOST_TEST(none == std::vector<double>({2.0, 0.1}), boost::test_tools::per_element());
  mg::autodiff::GradManager gm;
  gm.attach(lp);
  {
    auto rec = gm.record();
    gm.backward(F::nll_loss(lp, labels));
  }
  BOOST_TEST(values(lp.grad()) == std::vector<double>({0, 0, -0.5, -0.5, 0, 0}), boost::test_tools::per_element());
}

// ---- pointwise losses ------------------------------------------------------

BOOST_AUTO_TEST_CASE(mse_and_l1_known_values_and_gradients) {
  mg::Tensor p = mg::tensor<double>({1.0, 2.0, 3.0}, {3});
  mg::Tensor t = mg::tensor<double>({1.5, 2.0, 1.0}, {3});
  BOOST_TEST(F::mse_loss(p, t).item<double>() == (0.25 + 0 + 4) / 3, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(F::mse_loss(p, t, {.reduction = Reduction::sum}).item<double>() == 4.25,
             boost::test_tools::tolerance(1e-12));
  BOOST_TEST(F::l1_loss(p, t, {.reduction = Reduction::sum}).item<double>() == 2.5,
             boost::test_tools::tolerance(1e-12));
  BOOST_TEST(values(F::l1_loss(p, t, {.reduction = Reduction::none})) == std::vector<double>({0.5, 0, 2}),
             boost::test_tools::per_element());
  BOOST_TEST(F::mse_loss(p, t, {.reduction = Reduction::none}).shape() == mg::Shape({3}));
  BOOST_TEST(F::mse_loss(p, t).ndim() == 0);

  mg::autodiff::GradManager gm;
  gm.attach({p, t});
  {
    auto rec = gm.record();
    gm.backward(F::mse_loss(p, t));
  }
  BOOST_TEST(values(p.grad()) == std::vector<double>({-1.0 / 3, 0, 4.0 / 3}), boost::test_tools::per_element());
  BOOST_TEST(values(t.grad()) == std::vector<double>({1.0 / 3, 0, -4.0 / 3}), boost::test_tools::per_element());

  mg::Tensor p2 = p.clone().detach();
  mg::autodiff::GradManager gm2;
  gm2.attach(p2);
  {
    auto rec = gm2.record();
    gm2.backward(F::l1_loss(p2, t));
  }
  BOOST_TEST(values(p2.grad()) == std::vector<double>({-1.0 / 3, 0, 1.0 / 3}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(bce_with_logits_matches_definition_and_is_stable) {
  const std::vector<double> xs = {-2.0, -0.3, 0.0, 0.7, 3.0};
  const std::vector<double> ts = {0.0, 1.0, 0.5, 0.2, 1.0};
  mg::Tensor x = mg::tensor<double>(xs, {5});
  const auto t = mg::tensor<double>(ts, {5});
  const auto got = values(F::binary_cross_entropy_with_logits(x, t, {.reduction = Reduction::none}));
  for (size_t i = 0; i < xs.size(); ++i) {
    const double s = 1 / (1 + std::exp(-xs[i]));
    BOOST_TEST(got[i] == -(ts[i] * std::log(s) + (1 - ts[i]) * std::log(1 - s)), boost::test_tools::tolerance(1e-12));
  }
  mg::autodiff::GradManager gm;
  gm.attach(x);
  {
    auto rec = gm.record();
    gm.backward(F::binary_cross_entropy_with_logits(x, t, {.reduction = Reduction::sum}));
  }
  const auto g = values(x.grad());
  for (size_t i = 0; i < xs.size(); ++i)
    BOOST_TEST(g[i] == 1 / (1 + std::exp(-xs[i])) - ts[i], boost::test_tools::tolerance(1e-12));

  // Far in the tails, in float32: no inf, no nan, the right asymptotes.
  const auto big = mg::tensor<float>({100.f, -100.f, 100.f}, {3});
  const auto tb = mg::tensor<float>({1.f, 1.f, 0.f}, {3});
  const auto tail = values(F::binary_cross_entropy_with_logits(big, tb, {.reduction = Reduction::none}));
  BOOST_TEST(tail[0] >= 0.0);
  BOOST_TEST(tail[0] < 1e-30);
  BOOST_TEST(tail[1] == 100.0, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(tail[2] == 100.0, boost::test_tools::tolerance(1e-6));
}

// The pointwise losses' loops run per instruction set (backend/cpu/loss.cpp),
// binary cross-entropy's exp and log1p in float through fast_float.hpp.
// At every level this CPU has, over 20,011 float32 elements (two full blocks
// of the deterministic sum and a tail, every vector tail), logits from -30
// to 30 and targets in [0, 1]: the per-element losses, their mean and the
// gradient of the mean match the definition evaluated in double.
BOOST_AUTO_TEST_CASE(bce_with_logits_float32_matches_the_definition_at_every_instruction_set) {
  namespace simd = mg::simd;
  std::vector<simd::Level> levels{simd::Level::portable};
  if (simd::available() >= simd::Level::avx2) levels.push_back(simd::Level::avx2);
  if (simd::available() >= simd::Level::avx512) levels.push_back(simd::Level::avx512);
  const int64_t n = 20011;
  mg::manual_seed(21);
  const mg::Tensor x = mg::uniform({n}, -30, 30), t = mg::uniform({n}, 0, 1);
  const std::vector<double> xs = values(x), ts = values(t);
  std::vector<double> want(static_cast<size_t>(n)), want_grad(static_cast<size_t>(n));
  double want_mean = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    // -t log s - (1 - t) log(1 - s), with log s = -log1p(e^-x), log(1 - s) = -x - log1p(e^-x)
    const double l1p = xs[i] >= 0 ? std::log1p(std::exp(-xs[i])) : -xs[i] + std::log1p(std::exp(xs[i]));
    want[i] = ts[i] * l1p + (1 - ts[i]) * (xs[i] + l1p);
    want_mean += want[i] / static_cast<double>(n);
    want_grad[i] = (1 / (1 + std::exp(-xs[i])) - ts[i]) / static_cast<double>(n);
  }
  for (simd::Level level : levels) {
    simd::LevelScope scope(level);
    BOOST_TEST_CONTEXT("level " << static_cast<int>(level)) {
      const std::vector<double> got = values(F::binary_cross_entropy_with_logits(x, t, {.reduction = Reduction::none}));
      for (size_t i = 0; i < got.size(); ++i)
        BOOST_TEST(std::abs(got[i] - want[i]) <= 4e-6 * (1 + std::abs(want[i])), "element " << i);
      mg::Tensor xa = x.clone();
      mg::autodiff::GradManager gm;
      gm.attach(xa);
      mg::Tensor mean;
      {
        auto rec = gm.record();
        mean = F::binary_cross_entropy_with_logits(xa, t);
        gm.backward(mean);
      }
      BOOST_TEST(mean.item<double>() == want_mean, boost::test_tools::tolerance(1e-6));
      const std::vector<double> g = values(xa.grad());
      for (size_t i = 0; i < g.size(); ++i)
        BOOST_TEST(std::abs(g[i] - want_grad[i]) <= 1e-6 / static_cast<double>(n), "gradient " << i);
    }
  }
}

BOOST_AUTO_TEST_CASE(pointwise_losses_check_shapes_and_promote_dtypes) {
  const auto a = mg::zeros({2, 3});
  try {
    F::mse_loss(a, mg::zeros({3, 2}));
    BOOST_FAIL("expected a ShapeError");
  } catch (const mg::ShapeError& e) {
    BOOST_TEST(message_has(e, {"mse_loss", "float32[2, 3]", "float32[3, 2]"}), e.what());
  }
  BOOST_CHECK_THROW(F::l1_loss(a, mg::zeros({2, 3}, mg::DType::int32)), mg::DTypeError);
  BOOST_CHECK_THROW(F::binary_cross_entropy_with_logits(a, mg::zeros({6})), mg::ShapeError);
  // A bfloat16 prediction against a float32 target: computed and returned in float32.
  const auto pred = mg::full({2, 3}, 0.5, mg::DType::bfloat16);
  const auto loss = F::mse_loss(pred, mg::ones({2, 3}));
  BOOST_TEST(loss.dtype() == mg::DType::float32);
  BOOST_TEST(loss.item<double>() == 0.25);
}

BOOST_AUTO_TEST_CASE(large_losses_do_not_depend_on_thread_count) {
  mg::manual_seed(9);
  const auto logits = mg::uniform({4096, 40}, -4, 4);
  const auto labels = mg::tensor<int64_t>(std::vector<int64_t>(4096, 7), {4096});
  const auto p = mg::uniform({300000}, -1, 1), t = mg::uniform({300000}, -1, 1);
  const int before = mg::num_threads();
  mg::set_num_threads(1);
  const double ce1 = F::cross_entropy(logits, labels).item<double>();
  const double mse1 = F::mse_loss(p, t).item<double>();
  mg::set_num_threads(2);
  const double ce2 = F::cross_entropy(logits, labels).item<double>();
  const double mse2 = F::mse_loss(p, t).item<double>();
  mg::set_num_threads(before);
  BOOST_TEST(ce1 == ce2);
  BOOST_TEST(mse1 == mse2);
  BOOST_TEST(mse1 == 2.0 / 3.0, boost::test_tools::tolerance(0.02));  // E[(p - t)^2] for independent U(-1, 1)
}

// float32 rows [N, C] run a vector kernel per instruction set (portable,
// AVX2, AVX-512: backend/cpu/loss.cpp). At every level this CPU has, with
// row lengths that leave every tail of 4, 8 and 16 lanes and with label
// smoothing, the loss and the gradient match the float64 definition
// (softmax - target, scaled), and the levels agree with one another.
BOOST_AUTO_TEST_CASE(cross_entropy_float32_rows_at_every_instruction_set) {
  namespace simd = mg::simd;
  std::vector<simd::Level> levels{simd::Level::portable};
  if (simd::available() >= simd::Level::avx2) levels.push_back(simd::Level::avx2);
  if (simd::available() >= simd::Level::avx512) levels.push_back(simd::Level::avx512);
  for (int64_t c : {1, 3, 7, 15, 16, 17, 31, 33, 100, 1031})
    for (double smoothing : {0.0, 0.1}) {
      const int64_t n = 3;
      mg::manual_seed(static_cast<uint64_t>(c));
      const mg::Tensor x64 = mg::normal({n, c}, 0, 4, mg::DType::float64);
      std::vector<int64_t> y(n);
      for (int64_t i = 0; i < n; ++i) y[static_cast<size_t>(i)] = (i * 5 + 2) % c;
      const mg::Tensor labels = mg::tensor<int64_t>(y, {n});
      const std::vector<double> xs = values(x64);
      // The definition in double: per-row loss, and the gradient of their sum.
      std::vector<double> want_loss(n), want_grad(static_cast<size_t>(n * c));
      for (int64_t i = 0; i < n; ++i) {
        const std::vector<double> row = row_of(xs, i, c);
        want_loss[static_cast<size_t>(i)] = reference_cross_entropy(row, y[static_cast<size_t>(i)], smoothing);
        double z = 0;
        for (double v : row) z += std::exp(v);
        for (int64_t j = 0; j < c; ++j) {
          const double q = (j == y[static_cast<size_t>(i)] ? 1.0 - smoothing : 0.0) + smoothing / static_cast<double>(c);
          want_grad[static_cast<size_t>(i * c + j)] = std::exp(row[static_cast<size_t>(j)]) / z - q;
        }
      }
      std::vector<std::vector<double>> grads;
      for (simd::Level level : levels) {
        simd::LevelScope scope(level);
        BOOST_TEST_CONTEXT("C = " << c << ", smoothing " << smoothing << ", level " << static_cast<int>(level)) {
          const mg::Tensor x = x64.to(mg::DType::float32);
          mg::autodiff::GradManager gm;
          gm.attach({x});
          mg::Tensor per_row;
          {
            auto rec = gm.record();
            per_row = F::cross_entropy(x, labels, {.reduction = Reduction::none, .label_smoothing = smoothing});
            gm.backward(F::sum(per_row));
          }
          const std::vector<double> got_loss = values(per_row), got_grad = values(x.grad());
          for (int64_t i = 0; i < n; ++i)
            BOOST_TEST(std::abs(got_loss[static_cast<size_t>(i)] - want_loss[static_cast<size_t>(i)]) <=
                       2e-5 * (1 + std::abs(want_loss[static_cast<size_t>(i)])));
          for (size_t k = 0; k < got_grad.size(); ++k) BOOST_TEST(std::abs(got_grad[k] - want_grad[k]) <= 2e-6);
          grads.push_back(got_grad);
        }
      }
      for (size_t l = 1; l < grads.size(); ++l)
        for (size_t k = 0; k < grads[0].size(); ++k) BOOST_TEST(std::abs(grads[l][k] - grads[0][k]) <= 1e-6);
    }
}

BOOST_AUTO_TEST_SUITE_END()
