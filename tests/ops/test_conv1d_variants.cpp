// Values of F::conv_transpose1d and F::conv_tbc against PyTorch 2.15's
// torch.nn.functional.conv_transpose1d and torch.conv_tbc: the expected
// numbers were printed by torch (float64) for the inputs lin() builds here
// and are hard-coded. The op registry checks their gradients, 16-bit
// results and autocast entries (cases_conv_composed.cpp); misuse rows here.
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

BOOST_AUTO_TEST_SUITE(conv1d_variants)

BOOST_AUTO_TEST_CASE(conv_transpose1d_matches_torch) {
  const mg::Tensor x = lin({2, 3, 4}), w = lin({3, 2, 3}, 0.5), b = mg::tensor({0.5, -1.0}, {2}, mg::DType::float64);
  expect(F::conv_transpose1d(x, w, b, {.stride = 2, .padding = 1, .output_padding = 1}), {2, 2, 8},
         {0.25, -3.25, 0.25,  6.375, 0.25, -6,    3,     -3.875, -0.25, -1.25, -1.5, 1.75, -1.375, -0.75, 1.5,  -5.375,
          0.25, 6.375, 0.25,  -6,    3,    -6,    0.25,  3.5,    -1.5,  1.75,  -1.375, -0.75, 1.5, -6,    -1.125, 2.125});
  // Unbatched [C, L], groups 3, dilation 2.
  expect(F::conv_transpose1d(F::narrow(x, 0, 0, 1).reshape({3, 4}), lin({3, 1, 2}, 0.5), mg::Tensor(),
                             {.dilation = 2, .groups = 3}),
         {3, 6},
         {3.125, -1.25, 0, -2.625, -0.5, 1.25, -0.25, 0.75, -0.375, -1.875, 2.5, 0, -0.5, 0.375, 1.375, -1.75, 0.375,
          1.875});
}

BOOST_AUTO_TEST_CASE(conv_tbc_matches_torch) {
  const mg::Tensor x = lin({5, 2, 3}), w = lin({3, 3, 2}, 0.5), b = mg::tensor({0.25, -0.5}, {2}, mg::DType::float64);
  expect(F::conv_tbc(x, w, b, 1), {5, 2, 2},
         {-0.5, -1.5, 4.625, -1.625, 2.5, 4.5, -4, 6.625, -5, -0.875, -4.625, -1.5, 4, -4.875, 4.375, -5.5, -2, -2.875,
          -1.125, -3.125});
}

BOOST_AUTO_TEST_CASE(conv1d_variants_misuse_and_autocast) {
  const mg::Tensor x = mg::zeros({2, 3, 4}), w = mg::zeros({3, 2, 3});
  check_error<mg::ShapeError>([&] { F::conv_transpose1d(mg::zeros({2, 3, 4, 1}), w); },
                              {"conv_transpose1d", "[2, 3, 4, 1]"});
  check_error<mg::ShapeError>([&] { F::conv_transpose1d(mg::zeros({2, 4, 4}), w); }, {"conv_transpose1d", "channels"});
  check_error<mg::ValueError>([&] { F::conv_transpose1d(x, w, mg::Tensor(), {.stride = 2, .output_padding = 2}); },
                              {"conv_transpose1d", "output_padding"});
  check_error<mg::ShapeError>([&] { F::conv_transpose1d(x, w, mg::zeros({3})); }, {"conv_transpose1d", "bias"});
  check_error<mg::DTypeError>([&] { F::conv_transpose1d(x, mg::zeros({3, 2, 3}, mg::DType::float64)); },
                              {"conv_transpose1d", "dtypes differ", "float64"});
  const mg::Tensor xt = mg::zeros({5, 2, 3}), wt = mg::zeros({3, 3, 2}), bt = mg::zeros({2});
  check_error<mg::ShapeError>([&] { F::conv_tbc(mg::zeros({5, 3}), wt, bt); }, {"conv_tbc", "[T, N, C_in]"});
  check_error<mg::ShapeError>([&] { F::conv_tbc(xt, mg::zeros({3, 4, 2}), bt); }, {"conv_tbc", "channels"});
  check_error<mg::ShapeError>([&] { F::conv_tbc(xt, wt, mg::zeros({3})); }, {"conv_tbc", "bias"});
  check_error<mg::ShapeError>([&] { F::conv_tbc(xt, mg::zeros({7, 3, 2}), bt); }, {"conv_tbc", "empty"});
  check_error<mg::ValueError>([&] { F::conv_tbc(xt, wt, bt, -1); }, {"conv_tbc", "pad"});
  mg::amp::autocast scope(true, mg::DType::bfloat16);
  BOOST_TEST(F::conv_transpose1d(x, w).dtype() == mg::DType::bfloat16);
  BOOST_TEST(F::conv_tbc(xt, wt, bt).dtype() == mg::DType::bfloat16);
}

BOOST_AUTO_TEST_SUITE_END()
