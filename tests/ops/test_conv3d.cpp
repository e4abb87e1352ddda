// Values of F::conv3d and F::conv_transpose3d against PyTorch 2.15's
// F.conv3d and F.conv_transpose3d: the expected numbers were printed by
// torch (float64) for the inputs lin() builds here and are hard-coded. The
// op registry checks their gradients, 16-bit results and autocast entries
// (cases_conv_composed.cpp); the misuse rows are here.
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

void expect(const mg::Tensor& got, const mg::Shape& shape, const std::vector<double>& want, double tol = 1e-6) {
  torch_values::expect(got, shape, want, tol);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(conv3d)

BOOST_AUTO_TEST_CASE(conv3d_matches_torch) {
  const mg::Tensor b = mg::tensor({0.5, -1.0}, {2}, mg::DType::float64);
  expect(F::conv3d(lin({1, 2, 3, 3, 4}), lin({2, 2, 2, 2, 2}, 0.5), b,
                   {.stride = {1, 1, 2}, .padding = {1, 0, 1}, .dilation = {2, 1, 1}}),
         {1, 2, 3, 2, 3},
         {-1,     0.375, -4.5,   2.875, 0.875, 0.375, 3.625, -1,   -3.125, -1.125, 9.375, -0.375,
          2,      5.25,  1.5,    -1.125, -9.625, 4.875, -3.5, -8.25, 4.375,  0.875,  4.25,  -6.75,
          1.5,    -7.125, -10,   1.875, 8,     4.75,  3.625, 6.25, -2,     -7.25,  -3.5,  1.875});
}

BOOST_AUTO_TEST_CASE(conv_transpose3d_matches_torch) {
  const mg::Tensor b = mg::tensor({0.25, -0.5}, {2}, mg::DType::float64);
  expect(F::conv_transpose3d(lin({1, 2, 2, 2, 2}), lin({2, 1, 2, 1, 2}, 0.5), b,
                             {.stride = {2, 1, 1}, .padding = {1, 0, 0}, .output_padding = {1, 0, 0}, .groups = 2}),
         {1, 2, 3, 2, 3},
         {1.5,   -3.375, 1.5,  0.75,  -2.25, 3.375, -0.375, 2.375, -0.5,  -2.25, 1.25,  0.25,
          0,     1.625,  -1.625, -0.75, 2.75, 0.25,  -2.5,   1,     -0.5,  -1,    -3,    -0.5,
          -0.25, -1.5,   0.25, 0.125, -2.25, -0.875, 0.5,   -1.5,  -0.5,  2,     0,     -0.5});
}

BOOST_AUTO_TEST_CASE(conv3d_misuse_and_autocast) {
  const mg::Tensor x = mg::zeros({1, 2, 3, 3, 3}), w = mg::zeros({4, 2, 2, 2, 2});
  check_error<mg::ShapeError>([&] { F::conv3d(mg::zeros({2, 3, 3}), w); }, {"conv3d", "[2, 3, 3]"});
  check_error<mg::ShapeError>([&] { F::conv3d(x, mg::zeros({4, 3, 2, 2, 2})); }, {"conv3d", "channels"});
  check_error<mg::ShapeError>([&] { F::conv3d(x, mg::zeros({4, 2, 5, 2, 2})); }, {"conv3d", "empty"});
  check_error<mg::ShapeError>([&] { F::conv3d(x, w, mg::zeros({3})); }, {"conv3d", "bias"});
  check_error<mg::ValueError>([&] { F::conv3d(x, w, mg::Tensor(), {.stride = 0}); }, {"conv3d", "stride"});
  check_error<mg::DTypeError>([&] { F::conv3d(x, mg::zeros({4, 2, 2, 2, 2}, mg::DType::float64)); },
                              {"conv3d", "dtypes differ"});
  const mg::Tensor wt = mg::zeros({2, 3, 2, 2, 2});
  check_error<mg::ShapeError>([&] { F::conv_transpose3d(mg::zeros({1, 3, 2, 2, 2}), wt); },
                              {"conv_transpose3d", "channels"});
  check_error<mg::ValueError>([&] { F::conv_transpose3d(x, wt, mg::Tensor(), {.output_padding = 1}); },
                              {"conv_transpose3d", "output_padding"});
  mg::amp::autocast scope(true, mg::DType::bfloat16);
  BOOST_TEST(F::conv3d(x, w).dtype() == mg::DType::bfloat16);
  BOOST_TEST(F::conv_transpose3d(x, wt).dtype() == mg::DType::bfloat16);
}

BOOST_AUTO_TEST_SUITE_END()
