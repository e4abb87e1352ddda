// Values of F::pad's circular mode, F::interpolate's bicubic mode and
// F::max_unpool3d against PyTorch 2.15's F.pad(mode="circular"),
// F.interpolate(mode="bicubic") and F.max_unpool3d (fed the indices its
// F.max_pool3d(return_indices=True) gave): the expected numbers were printed
// by torch (float64; x's gradients by backward of sum(y * lin(y.shape, 0.5)))
// and are hard-coded. The op registry checks gradients, 16-bit results and
// autocast entries (cases_resize.cpp, cases_resample.cpp,
// cases_max_unpool.cpp); the misuse rows are here.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <utility>
#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "../common/test_util.hpp"
#include "torch_values.hpp"

namespace {

namespace mg = mixgrad;
namespace F = mixgrad::F;
using test_util::check_error;
using torch_values::lin;

void expect(const mg::Tensor& got, const mg::Shape& shape, const std::vector<double>& want, double tol = 1e-6) {
  torch_values::expect(got, shape, want, tol);
}

// y = op(lin(x_shape)) and the gradient of sum(y * lin(y.shape, 0.5)) in x.
template <class Op>
std::pair<mg::Tensor, mg::Tensor> run_with_grad(const mg::Shape& x_shape, Op op) {
  mg::Tensor x = lin(x_shape);
  mg::autodiff::GradManager gm;
  gm.attach(x);
  mg::Tensor y;
  {
    auto rec = gm.record();
    y = op(x);
    gm.backward(F::sum(F::mul(y, lin(y.shape(), 0.5))));
  }
  return {y, x.grad()};
}

struct Row {
  mg::Shape x;
  std::vector<double> y, grad;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(circular_bicubic_unpool3d)

BOOST_AUTO_TEST_CASE(circular_pad_matches_torch) {
  const auto circular = F::PadMode::circular;
  // pad == the dim's size wraps exactly once (allowed, as in PyTorch).
  auto [y1, g1] = run_with_grad({2, 3}, [&](const mg::Tensor& x) { return F::pad(x, {3, 2}, circular); });
  expect(y1, {2, 8},
         {-1.25, 0.5, -0.5, -1.25, 0.5, -0.5, -1.25, 0.5, 1.25, 0.25, -0.75, 1.25, 0.25, -0.75, 1.25, 0.25});
  expect(g1, {2, 3}, {2, 1.5, -2.5, -2, 3, -1.5});
  auto [y2, g2] = run_with_grad({1, 2, 3, 4}, [&](const mg::Tensor& x) { return F::pad(x, {2, 1, 0, 3}, circular); });
  expect(y2, {1, 2, 6, 7},
         {-0.5,  1.25,  -1.25, 0.5,  -0.5,  1.25,  -1.25, 1,     0,    0.25,  -0.75, 1,     0,    0.25,  -0.25,
          -1.25, -1,    0.75,  -0.25, -1.25, -1,    -0.5,  1.25,  -1.25, 0.5,  -0.5,  1.25,  -1.25, 1,    0,
          0.25,  -0.75, 1,     0,    0.25,  -0.25, -1.25, -1,    0.75,  -0.25, -1.25, -1,    1.25,  0.25, 0.5,
          -0.5,  1.25,  0.25,  0.5,  0,     -1,    -0.75, 1,     0,     -1,   -0.75, -1.25, 0.5,   0.75, -0.25,
          -1.25, 0.5,   0.75,  1.25, 0.25,  0.5,   -0.5,  1.25,  0.25,  0.5,  0,     -1,    -0.75, 1,    0,
          -1,    -0.75, -1.25, 0.5,  0.75,  -0.25, -1.25, 0.5,   0.75});
  expect(g2, {1, 2, 3, 4}, {0.5, 1.5, 0, -2.5, -0.5, 1, -1, -3.5, -1.5, 0.5, 3.5, 1,
                            0, -1.5, -0.5, 2.5, -1, -2, -1.5, 1.5, 3.5, 3, -2.5, 0.5});
  auto [y3, g3] =
      run_with_grad({1, 1, 2, 3, 3}, [&](const mg::Tensor& x) { return F::pad(x, {1, 2, 3, 0, 1, 1}, circular); });
  BOOST_TEST(mg::to_string(y3.shape()) == "[1, 1, 4, 6, 6]");
  // The first and last of the 144 values: depth 0 is x's depth 1, row 0 its row 0, column 0 its column 2.
  const std::vector<double> v3 = test_util::values(y3);
  BOOST_TEST(v3.front() == -1.25);
  BOOST_TEST(v3.back() == 0.0);
  expect(g3, {1, 1, 2, 3, 3}, {2.5, -2.5, 2, 0, 0.5, -0.5, -2.5, -2, 2.5, 1, -4, 0.5, 4, -1, -2, -4, 2, 1});
}

BOOST_AUTO_TEST_CASE(circular_pad_misuse_leaves_the_input_as_it_was) {
  mg::Tensor x = lin({1, 2, 3});
  const std::vector<double> before = test_util::values(x);
  const auto version = x.version();
  check_error<mg::ShapeError>([&] { F::pad(x, {4, 0}, F::PadMode::circular); },
                              {"pad", "circular", "{4, 0}", "[1, 2, 3]", "more than once"});
  check_error<mg::ShapeError>([&] { F::pad(x, {0, 0, 1, 3}, F::PadMode::circular); },
                              {"pad", "circular", "size 2"});
  check_error<mg::ShapeError>([&] { F::pad(x, {-1, 1}, F::PadMode::circular); }, {"pad", "negative"});
  check_error<mg::DTypeError>([] { F::pad(mg::tensor<int64_t>({1, 2}, {1, 2}), {1, 1}, F::PadMode::circular); },
                              {"pad"});
  BOOST_TEST(x.version() == version);
  BOOST_TEST(test_util::values(x) == before);
  // Under autocast it keeps the input's dtype, as PyTorch 2.15's CPU autocast does.
  mg::amp::autocast scope(true, mg::DType::bfloat16);
  BOOST_TEST(F::pad(mg::ones({1, 2, 3}, mg::DType::bfloat16), {1, 1}, F::PadMode::circular).dtype() ==
             mg::DType::bfloat16);
}

BOOST_AUTO_TEST_CASE(interpolate_bicubic_matches_torch) {
  const auto bicubic = F::InterpolateMode::bicubic;
  auto [y1, g1] = run_with_grad({1, 2, 3, 4}, [&](const mg::Tensor& x) {
    return F::interpolate(x, {.scale_factor = {1.5, 2.5}, .mode = bicubic});
  });
  BOOST_TEST(mg::to_string(y1.shape()) == "[1, 2, 4, 10]");
  const std::vector<double> v1 = test_util::values(y1);
  const std::vector<double> head{-1.59946419, -1.20877235, -0.269721137, 0.520684245, 0.388194444,
                                 -0.409895833, -0.542385634, 0.248019748, 1.18707096,  1.5777628};
  for (size_t i = 0; i < head.size(); ++i) BOOST_TEST(std::abs(v1[i] - head[i]) <= 1e-6, i);
  BOOST_TEST(std::abs(v1.back() - 0.412445312) <= 1e-6);
  expect(g1, {1, 2, 3, 4},
         {-3.66706554, 3.10008594, 0.899934462, -0.713163194, -1.62652865, -0.162700376, 2.5873763, 0.154399016,
          -0.905655816, -2.01651056, 1.91256424, 1.43726418, -0.212216146, -2.39164844, 0.0930303819, 1.17402865,
          0.903842593, -0.963804687, -3.1397053, 3.39006091, 0.119123553, 0.113453125, -1.30570009, -1.28046455});
  auto [y2, g2] = run_with_grad({1, 1, 3, 4}, [&](const mg::Tensor& x) {
    return F::interpolate(x, {.size = {5, 3}, .mode = bicubic, .align_corners = true});
  });
  expect(y2, {1, 1, 5, 3},
         {-1.25, 0, 1.25, -0.3828125, 0.0266113281, 0.7421875, 0.25, 0.125, 0, -0.234375, 0.328125, -0.7421875, -1,
          0.5078125, -1.25});
  expect(g2, {1, 1, 3, 4},
         {-1.51220703, 0.770019531, 0.770019531, -1.63720703, 4.375, 0, 0, -4.375, 1.63720703, -0.770019531,
          -0.770019531, 1.51220703});
  auto [y3, g3] = run_with_grad({1, 1, 5, 6}, [&](const mg::Tensor& x) {
    return F::interpolate(x, {.scale_factor = 0.6, .mode = bicubic});
  });
  expect(y3, {1, 1, 3, 3},
         {-0.171467764, -0.782407407, 0.668981481, 0.087962963, 1.25, -0.685185185, -0.0845336077, 0.37962963,
          -0.0551268861});
  expect(g3, {1, 1, 5, 6},
         {-1.17369684, -0.634430727, 0.818415638, -0.253772291, -0.545610425, 0.0761316872, -0.634430727,
          -0.342935528, 0.442386831, -0.137174211, -0.294924554, 0.0411522634, 1.73199588, 0.936213992, 0.37808642,
          -0.49382716, -1.0617284, 0.148148148, 0.507544582, 0.274348422, 0, -0.274348422, -0.589849108,
          0.0823045267, 0.938957476, 0.507544582, 0, -0.507544582, -1.09122085, 0.152263374});
}

BOOST_AUTO_TEST_CASE(interpolate_bicubic_misuse_and_autocast) {
  const mg::Tensor x = lin({1, 1, 3, 4});
  const auto bicubic = F::InterpolateMode::bicubic;
  check_error<mg::ValueError>([&] { F::interpolate(x, {.mode = bicubic}); }, {"interpolate", "exactly one"});
  check_error<mg::ValueError>([&] { F::interpolate(x, {.size = 4, .scale_factor = 2, .mode = bicubic}); },
                              {"interpolate", "exactly one", "[1, 1, 3, 4]"});
  check_error<mg::ValueError>([&] { F::interpolate(x, {.scale_factor = -1, .mode = bicubic}); },
                              {"interpolate", "scale_factor"});
  check_error<mg::ShapeError>([&] { F::interpolate(mg::zeros({3, 4, 4}), {.size = 8, .mode = bicubic}); },
                              {"interpolate", "[3, 4, 4]"});
  check_error<mg::ValueError>([&] { F::interpolate(x, {.size = 4, .align_corners = true}); },
                              {"interpolate", "nearest"});
  mg::amp::autocast scope(true, mg::DType::bfloat16);
  BOOST_TEST(F::interpolate(mg::ones({1, 1, 2, 2}, mg::DType::bfloat16), {.size = 3, .mode = bicubic}).dtype() ==
             mg::DType::float32);
}

BOOST_AUTO_TEST_CASE(max_unpool3d_puts_values_back_at_torch_max_pool3d_indices) {
  // torch: max_pool3d(lin([1, 2, 4, 4, 4]), 2, return_indices=True).
  const mg::Tensor pooled = mg::tensor({1, 1.25, 1.25, 1.25, 1.25, 1, 1, 1.25, 1.25, 1, 1, 1.25, 1.25, 1.25, 1.25, 1},
                                       {1, 2, 2, 2, 2}, mg::DType::float64);
  const mg::Tensor idx = mg::tensor<int64_t>({17, 3, 25, 14, 36, 39, 61, 47, 5, 19, 8, 27, 49, 38, 60, 63},
                                             {1, 2, 2, 2, 2});
  const mg::Tensor y = F::max_unpool3d(pooled, idx, {.kernel_size = 2});
  BOOST_TEST(mg::to_string(y.shape()) == "[1, 2, 4, 4, 4]");
  const std::vector<double> v = test_util::values(y);
  const std::vector<int64_t> at{3, 14, 17, 25, 36, 39, 47, 61, 64 + 5, 64 + 8, 64 + 19, 64 + 27, 64 + 38, 64 + 49,
                                64 + 60, 64 + 63};
  const std::vector<double> want{1.25, 1.25, 1, 1.25, 1.25, 1, 1.25, 1, 1.25, 1, 1, 1.25, 1.25, 1.25, 1.25, 1};
  double rest = 0;
  for (double e : v) rest += std::abs(e);
  for (size_t k = 0; k < at.size(); ++k) {
    BOOST_TEST(v[static_cast<size_t>(at[k])] == want[k], k);
    rest -= std::abs(want[k]);
  }
  BOOST_TEST(rest == 0.0);  // zeros everywhere else
  // torch: max_pool3d(lin([2, 3, 4, 5]), (1, 2, 2), stride=(1, 2, 2), return_indices=True), unbatched,
  // unpooled to output_size (3, 5, 5).
  const mg::Tensor p2 = mg::tensor({1, 1.25, 0.25, 1, 1.25, 1, 1.25, 0.25, 0.5, 1.25, 1, 1.25,
                                    1, 0.5, 0.75, 1, 1.25, 1, 1.25, 0.75, 1, 1.25, 1, 1.25},
                                   {2, 3, 2, 2}, mg::DType::float64);
  const mg::Tensor i2 = mg::tensor<int64_t>({6, 3, 15, 17, 25, 28, 36, 37, 45, 47, 50, 58,
                                             1, 7, 15, 12, 20, 23, 31, 37, 45, 42, 56, 53},
                                            {2, 3, 2, 2});
  const mg::Tensor y2 =
      F::max_unpool3d(p2, i2, {.kernel_size = {1, 2, 2}, .stride = {1, 2, 2}, .output_size = {3, 5, 5}});
  BOOST_TEST(mg::to_string(y2.shape()) == "[2, 3, 5, 5]");
  const std::vector<double> v2 = test_util::values(y2);
  BOOST_TEST(v2[3] == 1.25);
  BOOST_TEST(v2[6] == 1.0);
  BOOST_TEST(v2[75 + 1] == 1.0);
  BOOST_TEST(v2[75 + 53] == 1.25);
  BOOST_TEST(v2[75 + 56] == 1.0);
  BOOST_TEST(v2[74] == 0.0);
}

BOOST_AUTO_TEST_CASE(max_unpool3d_misuse_and_autocast) {
  const mg::Tensor x = mg::zeros({1, 1, 1, 2, 2}), idx = mg::tensor<int64_t>({0, 1, 2, 3}, {1, 1, 1, 2, 2});
  check_error<mg::ShapeError>([&] { F::max_unpool3d(x, mg::tensor<int64_t>({0, 1, 2, 32}, {1, 1, 1, 2, 2})); },
                              {"max_unpool3d", "32", "outside", "[1, 1, 1, 2, 2]"});
  check_error<mg::ShapeError>([&] { F::max_unpool3d(x, mg::tensor<int64_t>({0, 1}, {1, 1, 1, 1, 2})); },
                              {"max_unpool3d", "one shape", "[1, 1, 1, 1, 2]"});
  check_error<mg::ShapeError>([&] { F::max_unpool3d(x, idx, {.output_size = {2, 4, 7}}); },
                              {"max_unpool3d", "output_size 7"});
  check_error<mg::DTypeError>([&] { F::max_unpool3d(x, mg::zeros({1, 1, 1, 2, 2})); }, {"max_unpool3d", "int64"});
  check_error<mg::ShapeError>([] { F::max_unpool3d(mg::zeros({2, 2, 2}), mg::zeros({2, 2, 2}, mg::DType::int64)); },
                              {"max_unpool3d", "[N, C, D, H, W]"});
  check_error<mg::ValueError>([&] { F::max_unpool3d(x, idx, {.kernel_size = {2, 0, 2}}); },
                              {"max_unpool3d", "kernel_size"});
  mg::amp::autocast scope(true, mg::DType::bfloat16);
  BOOST_TEST(F::max_unpool3d(mg::ones({1, 1, 1, 2, 2}, mg::DType::bfloat16), idx).dtype() == mg::DType::float32);
}

BOOST_AUTO_TEST_SUITE_END()
