// F::pad and F::interpolate against values worked out by hand from
// PyTorch's definitions, their gradients on small inputs, and their errors
// (typed, naming the op and the input, nothing changed).
#include <boost/test/unit_test.hpp>

#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "../common/test_util.hpp"

namespace {

using test_util::values;

namespace mg = mixgrad;
namespace F = mixgrad::F;
using F::InterpolateMode;
using F::PadMode;

void expect_values(const mg::Tensor& t, const std::vector<double>& want, double tol = 1e-6) {
  const auto got = values(t);
  BOOST_TEST_REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) BOOST_TEST(std::abs(got[i] - want[i]) <= tol, "at " << i << ": " << got[i] << " vs " << want[i]);
}

// Gradient of sum(w * f(x)) with respect to x.
mg::Tensor grad_of(const mg::Tensor& x_in, const mg::Tensor& w, const std::function<mg::Tensor(const mg::Tensor&)>& f) {
  mg::Tensor x = x_in.clone();
  mg::autodiff::GradManager gm;
  gm.attach(x);
  {
    auto rec = gm.record();
    gm.backward(f(x), w);
  }
  return x.grad();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(resize)

BOOST_AUTO_TEST_CASE(pad_modes_match_hand_values) {
  const mg::Tensor x = mg::tensor({1.f, 2.f, 3.f}, {1, 3});
  expect_values(F::pad(x, {2, 1}, PadMode::constant, 9.0), {9, 9, 1, 2, 3, 9});
  expect_values(F::pad(x, {2, 2}, PadMode::reflect), {3, 2, 1, 2, 3, 2, 1});
  expect_values(F::pad(x, {2, 1}, PadMode::replicate), {1, 1, 1, 2, 3, 3});
  // Two dims: {left, right, top, bottom}.
  const mg::Tensor y = F::pad(mg::tensor({1.f, 2.f, 3.f, 4.f}, {1, 2, 2}), {1, 0, 0, 1});
  BOOST_TEST((y.shape() == mg::Shape{1, 3, 3}));
  expect_values(y, {0, 1, 2, 0, 3, 4, 0, 0, 0});
}

BOOST_AUTO_TEST_CASE(pad_gradient_sums_the_copies) {
  const mg::Tensor x = mg::tensor({1.f, 2.f, 3.f}, {1, 3});
  const mg::Tensor w = mg::tensor({1.f, 10.f, 100.f, 1000.f, 10000.f, 100000.f}, {1, 6});
  // replicate {2, 1}: outputs come from x0, x0, x0, x1, x2, x2.
  expect_values(grad_of(x, w, [](const mg::Tensor& t) { return F::pad(t, {2, 1}, PadMode::replicate); }),
                {111, 1000, 110000});
  // reflect {2, 1}: x2, x1, x0, x1, x2, x1.
  expect_values(grad_of(x, w, [](const mg::Tensor& t) { return F::pad(t, {2, 1}, PadMode::reflect); }),
                {100, 10 + 1000 + 100000, 1 + 10000});
}

// x = [[1, 2], [3, 4]] to 4 x 4. align_corners=false: source coordinate
// (o + 0.5) / 2 - 0.5 clamped at 0 -> 0, 0.25, 0.75, 1 (clamped at the top
// index). align_corners=true: o * 1/3 -> 0, 1/3, 2/3, 1.
BOOST_AUTO_TEST_CASE(bilinear_2x2_to_4x4_both_alignments) {
  const mg::Tensor x = mg::tensor({1.f, 2.f, 3.f, 4.f}, {1, 1, 2, 2});
  // Row r, column c interpolate v = 1 + 2 * sr + sc on the 2x2 grid.
  auto grid = [](const std::vector<double>& s) {
    std::vector<double> v;
    for (double sr : s)
      for (double sc : s) v.push_back(1 + 2 * sr + sc);
    return v;
  };
  expect_values(F::interpolate(x, {.size = 4, .mode = InterpolateMode::bilinear}), grid({0, 0.25, 0.75, 1}));
  expect_values(F::interpolate(x, {.scale_factor = 2, .mode = InterpolateMode::bilinear}), grid({0, 0.25, 0.75, 1}));
  expect_values(F::interpolate(x, {.size = 4, .mode = InterpolateMode::bilinear, .align_corners = true}),
                grid({0, 1.0 / 3, 2.0 / 3, 1}));
  // First row spelled out, align_corners=false: 1, 1.25, 1.75, 2.
  expect_values(F::narrow(F::interpolate(x, {.size = 4, .mode = InterpolateMode::bilinear}), 2, 0, 1),
                {1, 1.25, 1.75, 2});
}

BOOST_AUTO_TEST_CASE(nearest_hand_values_and_gradient) {
  const mg::Tensor x = mg::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {1, 1, 2, 3});
  expect_values(F::upsample(x, {.scale_factor = 2}),
                {1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 4, 4, 5, 5, 6, 6});
  // 3 columns to 2: floor(o * 3 / 2) -> 0, 1; 2 rows to 3: floor(o * 2 / 3) -> 0, 0, 1.
  const mg::Tensor y = F::interpolate(x, {.size = {3, 2}});
  expect_values(y, {1, 2, 1, 2, 4, 5});
  const mg::Tensor w = mg::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {1, 1, 3, 2});
  expect_values(grad_of(x, w, [](const mg::Tensor& t) { return F::interpolate(t, {.size = {3, 2}}); }),
                {1 + 3, 2 + 4, 0, 5, 6, 0});
}

BOOST_AUTO_TEST_CASE(bilinear_gradient_of_a_uniform_weight_sums_to_the_output_count) {
  const mg::Tensor x = mg::uniform({2, 3, 3, 5}, -1, 1);
  const mg::Tensor g = grad_of(x, mg::ones({2, 3, 7, 4}), [](const mg::Tensor& t) {
    return F::interpolate(t, {.size = {7, 4}, .mode = InterpolateMode::bilinear});
  });
  // Each output's weights sum to one, so the gradient sums to 7 * 4 per plane.
  BOOST_TEST(values(F::sum(g)).at(0) == 2 * 3 * 28, boost::test_tools::tolerance(1e-6));
}

BOOST_AUTO_TEST_CASE(bad_arguments_throw_typed_errors_naming_the_op) {
  const mg::Tensor x = mg::uniform({1, 2, 3, 3}, -1, 1);
  const auto before = values(x);
  auto message_has = [](const std::string& what) {
    return [what](const mg::Error& e) { return std::string(e.what()).find(what) != std::string::npos; };
  };
  BOOST_CHECK_EXCEPTION(F::pad(x, {1}), mg::ShapeError, message_has("pad"));
  BOOST_CHECK_EXCEPTION(F::pad(x, {1, -1}), mg::ShapeError, message_has("negative"));
  BOOST_CHECK_EXCEPTION(F::pad(x, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1}), mg::ShapeError, message_has("float32[1, 2, 3, 3]"));
  BOOST_CHECK_EXCEPTION(F::pad(x, {3, 0}, PadMode::reflect), mg::ShapeError, message_has("reflect"));
  BOOST_CHECK_EXCEPTION(F::pad(mg::zeros({2, 0}), {1, 1}, PadMode::replicate), mg::ShapeError,
                        message_has("replicate"));
  BOOST_CHECK_EXCEPTION(F::pad(mg::zeros({2, 2}, mg::DType::int32), {1, 1}), mg::DTypeError, message_has("pad"));
  BOOST_CHECK_EXCEPTION(F::interpolate(x, {}), mg::ValueError, message_has("interpolate"));
  BOOST_CHECK_EXCEPTION(F::interpolate(x, {.size = 4, .scale_factor = 2}), mg::ValueError, message_has("exactly one"));
  BOOST_CHECK_EXCEPTION(F::interpolate(x, {.size = 4, .align_corners = true}), mg::ValueError,
                        message_has("align_corners"));
  BOOST_CHECK_EXCEPTION(F::interpolate(x, {.scale_factor = -1}), mg::ValueError, message_has("scale_factor"));
  BOOST_CHECK_EXCEPTION(F::interpolate(x, {.scale_factor = 0.1}), mg::ShapeError, message_has("positive"));
  BOOST_CHECK_EXCEPTION(F::interpolate(mg::zeros({2, 3, 4}), {.size = 2}), mg::ShapeError,
                        message_has("float32[2, 3, 4]"));
  BOOST_TEST(values(x) == before, boost::test_tools::per_element());
  // Constant padding of an empty dim fills it.
  expect_values(F::pad(mg::zeros({1, 0}), {1, 2}, PadMode::constant, 5.0), {5, 5, 5});
}

BOOST_AUTO_TEST_CASE(autocast_runs_upsampling_in_float32_on_the_cpu_and_pad_in_the_input_dtype) {
  const mg::Tensor x = mg::uniform({1, 1, 2, 2}, -1, 1, mg::DType::bfloat16);
  mg::amp::autocast scope;
  BOOST_TEST((F::interpolate(x, {.scale_factor = 2}).dtype() == mg::DType::float32));
  BOOST_TEST((F::interpolate(x, {.scale_factor = 2, .mode = InterpolateMode::bilinear}).dtype() == mg::DType::float32));
  BOOST_TEST((F::pad(x, {1, 1}).dtype() == mg::DType::bfloat16));
}

BOOST_AUTO_TEST_SUITE_END()
