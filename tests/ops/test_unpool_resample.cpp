// Values of F::max_unpool1d / 2d, F::upsample_bicubic2d and F::grid_sample
// against PyTorch 2.15's F.max_unpool*d (fed the indices its
// F.max_pool*d(return_indices=True) gave), F.interpolate(mode="bicubic")
// and F.grid_sample: the expected numbers were printed by torch (float64,
// grid gradients by torch.autograd.grad) and are hard-coded. The op
// registry checks gradients, 16-bit results and autocast entries
// (cases_max_unpool.cpp, cases_resample.cpp); the misuse rows are here.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "../common/test_util.hpp"
#include "torch_values.hpp"

namespace {

namespace mg = mixgrad;
namespace F = mixgrad::F;
using test_util::check_error;
using test_util::values;
using torch_values::lin;

void expect(const mg::Tensor& got, const mg::Shape& shape, const std::vector<double>& want, double tol = 1e-5) {
  torch_values::expect(got, shape, want, tol);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(unpool_resample)

BOOST_AUTO_TEST_CASE(max_unpool_puts_values_back_at_torch_max_pool_indices) {
  // torch: max_pool2d(lin([2, 1, 4, 4]), 2, return_indices=True).
  const mg::Tensor pooled = mg::tensor({0.5, 1.25, 0.75, 1.25, 1, 0.5, 1.25, 0.75}, {2, 1, 2, 2}, mg::DType::float64);
  const mg::Tensor idx = mg::tensor<int64_t>({1, 3, 9, 14, 1, 7, 9, 15}, {2, 1, 2, 2});
  expect(F::max_unpool2d(pooled, idx, {.kernel_size = 2}), {2, 1, 4, 4},
         {0, 0.5, 0, 1.25, 0, 0, 0, 0, 0, 0.75, 0, 0, 0, 0, 1.25, 0,
          0, 1, 0, 0, 0, 0, 0, 0.5, 0, 1.25, 0, 0, 0, 0, 0, 0.75});
  expect(F::max_unpool2d(pooled, idx, {.kernel_size = 2, .output_size = {5, 5}}), {2, 1, 5, 5},
         {0, 0.5, 0, 1.25, 0, 0, 0, 0, 0, 0.75, 0, 0, 0, 0, 1.25, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
          0, 1, 0, 0, 0, 0, 0, 0.5, 0, 1.25, 0, 0, 0, 0, 0, 0.75, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  // torch: max_pool1d(lin([1, 2, 6]), 3, stride=2, return_indices=True).
  const mg::Tensor p1 = mg::tensor({0.5, 1.25, 1, 0.75}, {1, 2, 2}, mg::DType::float64);
  expect(F::max_unpool1d(p1, mg::tensor<int64_t>({1, 3, 0, 3}, {1, 2, 2}), {.kernel_size = 3, .stride = 2}), {1, 2, 5},
         {0, 0.5, 0, 1.25, 0, 1, 0, 0, 0.75, 0});
}

BOOST_AUTO_TEST_CASE(max_unpool_misuse) {
  const mg::Tensor x = mg::zeros({1, 1, 2, 2}), idx = mg::tensor<int64_t>({0, 1, 2, 3}, {1, 1, 2, 2});
  check_error<mg::ShapeError>([&] { F::max_unpool2d(x, mg::tensor<int64_t>({0, 16, 2, 3}, {1, 1, 2, 2})); },
                              {"max_unpool2d", "16", "outside"});
  check_error<mg::ShapeError>([&] { F::max_unpool2d(x, mg::tensor<int64_t>({0, 1}, {1, 1, 1, 2})); },
                              {"max_unpool2d", "one shape", "[1, 1, 1, 2]"});
  check_error<mg::ShapeError>([&] { F::max_unpool2d(x, idx, {.output_size = {6, 4}}); }, {"max_unpool2d", "output_size"});
  check_error<mg::DTypeError>([&] { F::max_unpool2d(x, mg::zeros({1, 1, 2, 2})); }, {"max_unpool2d", "int64"});
  check_error<mg::ShapeError>([&] { F::max_unpool1d(x, idx); }, {"max_unpool1d", "[N, C, L]"});
}

BOOST_AUTO_TEST_CASE(upsample_bicubic2d_matches_torch_interpolate) {
  const mg::Tensor x = lin({1, 1, 3, 4});
  expect(F::upsample_bicubic2d(x, {.size = {4, 6}}), {1, 1, 4, 6},
         {-1.52671, -0.271717, 0.55311,  -0.571054, 0.253773,  1.50877,   -0.126188, -0.40826,
          -0.338913, 0.439888, 0.691769, 0.586984,  -0.00863436, -0.290707, -0.19891, 0.669689,
          0.162777,  -0.7008,  -1.25877, -0.00377274, 0.872224, -0.04726,  -0.951977, -1.42653});
  expect(F::upsample_bicubic2d(x, {.scale_factor = 1.5, .align_corners = true}), {1, 1, 4, 6},
         {-1.25, -0.071, 0.45, -0.45, 0.071, 1.25, -0.0833333, -0.481, -0.352741, 0.459593, 0.743074, 0.532407,
          0.0231481, -0.374519, -0.218148, 0.678519, 0.395093, -0.532407, -1, 0.179, 0.766, 0.064, -0.746, -1.25});
  check_error<mg::ValueError>([&] { F::upsample_bicubic2d(x, {}); }, {"upsample_bicubic2d", "exactly one"});
  check_error<mg::ShapeError>([] { F::upsample_bicubic2d(mg::zeros({3, 4, 4}), {.size = 8}); },
                              {"upsample_bicubic2d", "[3, 4, 4]"});
  mg::amp::autocast scope(true, mg::DType::bfloat16);
  BOOST_TEST(F::upsample_bicubic2d(mg::ones({1, 1, 2, 2}, mg::DType::bfloat16), {.size = 3}).dtype() ==
             mg::DType::float32);
}

BOOST_AUTO_TEST_CASE(grid_sample_values_and_grid_gradients_match_torch) {
  using M = F::GridSampleMode;
  using P = F::GridSamplePadding;
  const mg::Tensor x = lin({1, 2, 3, 4});
  const std::vector<double> points{-1.2, -0.9, 0.3, 0.1, 0.95, 1.25, -0.4, 0.6, 1.1, -1.05, 0.0, 0.0};
  struct Row {
    M mode;
    P padding;
    bool align;
    std::vector<double> y, ggrid;
  };
  const std::vector<Row> rows{
      {M::bilinear, P::zeros, false,
       {-0.08125, 0.7125, -0.09375, 0.1575, 0.159375, 0.125, 0.0325, -0.24625, 0.0375, 0.0925, 0.031875, 0.5},
       {5.3625, 0.61875, -2, -1.875, -0.0625, -0.225, 5.2, 1.575, -0.425, 0.225, -0.25, 4.40625}},
      {M::bilinear, P::border, true,
       {-1.1, 0.80125, -1.175, 0.085, 1.25, 0.125, 0.375, -0.075, 0.36875, 0.24, 0.25, 0.5},
       {0, -6.25, 2.2125, -1.1125, -3.75, 0, 2.6625, 1.6, 0, 0, -0.1875, 2.9375}},
      {M::bilinear, P::reflection, true,
       {-0.6575, 0.80125, -0.8625, 0.085, 0.945625, 0.125, 0.1575, -0.075, 0.0453125, 0.24, 0.3375, 0.5},
       {7.70625, -2.5375, 2.2125, -1.1125, -1.6875, 1.3375, 2.6625, 1.6, -1.95937, -0.20625, -0.1875, 2.9375}},
      {M::bilinear, P::reflection, false,
       {-1.25, 0.7125, -1.25, 0.1575, 1.25, 0.125, 0.5, -0.24625, 0.5, 0.0925, 0.25, 0.5},
       {0, 0, -2, -1.875, 0, 0, 5.2, 1.575, 0, 0, -0.25, 4.40625}},
      {M::nearest, P::zeros, false, {0, 1, 0, 0.75, 0, 1, 0, 0, 0, -0.25, 0, 0}, {}},
      {M::nearest, P::zeros, true, {-1.25, 1, -1.25, 0.75, 1.25, 1, 0.5, 0, 0.5, -0.25, 0.25, 0}, {}},
  };
  for (const Row& r : rows) {
    BOOST_TEST_CONTEXT("mode " << static_cast<int>(r.mode) << ", padding " << static_cast<int>(r.padding)
                               << ", align_corners " << r.align) {
      mg::Tensor grid = mg::tensor(points, {1, 2, 3, 2}, mg::DType::float64);
      mg::autodiff::GradManager gm;
      gm.attach(grid);
      mg::Tensor y;
      {
        auto rec = gm.record();
        y = F::grid_sample(x, grid, {.mode = r.mode, .padding_mode = r.padding, .align_corners = r.align});
        gm.backward(F::sum(F::mul(y, lin(y.shape(), 0.5))));
      }
      expect(y, {1, 2, 2, 3}, r.y);
      if (!r.ggrid.empty()) expect(grid.grad(), {1, 2, 3, 2}, r.ggrid);
    }
  }
}

BOOST_AUTO_TEST_CASE(grid_sample_misuse_and_autocast) {
  const mg::Tensor x = mg::zeros({1, 2, 3, 4});
  check_error<mg::ShapeError>([&] { F::grid_sample(x, mg::zeros({1, 2, 3, 3})); }, {"grid_sample", "[1, 2, 3, 3]"});
  check_error<mg::ShapeError>([&] { F::grid_sample(x, mg::zeros({2, 2, 3, 2})); }, {"grid_sample", "x's N"});
  check_error<mg::ShapeError>([&] { F::grid_sample(mg::zeros({2, 3, 4}), mg::zeros({2, 2, 3, 2})); },
                              {"grid_sample", "[N, C, H, W]"});
  check_error<mg::DTypeError>([&] { F::grid_sample(x, mg::zeros({1, 2, 3, 2}, mg::DType::float64)); },
                              {"grid_sample", "dtypes differ"});
  mg::amp::autocast scope(true, mg::DType::bfloat16);
  BOOST_TEST(F::grid_sample(mg::ones({1, 1, 2, 2}, mg::DType::bfloat16), mg::zeros({1, 1, 1, 2})).dtype() ==
             mg::DType::float32);
}

BOOST_AUTO_TEST_SUITE_END()
