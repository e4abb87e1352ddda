// Values of F::einsum and F::addmm_activation against PyTorch 2.15's
// torch.einsum and torch._addmm_activation: the expected numbers were
// printed by torch (float64) for the inputs lin() builds here and are
// hard-coded. Their gradients, 16-bit results and autocast entries are
// checked by the op registry (cases_einsum_cdist.cpp); the misuse rows here.
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

BOOST_AUTO_TEST_SUITE(composed_products)

BOOST_AUTO_TEST_CASE(einsum_matches_torch_einsum) {
  const mg::Tensor a = lin({2, 3, 4}), b = lin({2, 4, 5}, 0.5), m = lin({3, 3}), u = lin({3}), v = lin({4}, 0.5);
  expect(F::einsum("bij,bjk->bik", {a, b}), {2, 3, 5},
         {3.25, -0.875, 3.25,  -3.625, -3.625, 0,     -3.75, 0.75,  1.125,  1.5,   0.875, 3,     -1.75,  -3.75, 2.5,
          -3.25, 2,      -1,   -4,     1.25,   2.375, -1.625, -0.125, 2.75, -1.25, 2.5,   -1.125, -0.625, 2.625, -1});
  expect(F::einsum("ii", {m}), {}, {-2});
  expect(F::einsum("ii->i", {m}), {3}, {-1.25, 0.25, -1});
  expect(F::einsum("i,j", {u, v}), {3, 4}, {3.125, -1.25, 1.25, -3.125, -1.25, 0.5, -0.5, 1.25, 1.25, -0.5, 0.5, -1.25});
  expect(F::einsum("...ij->...ji", {a}), {2, 4, 3},
         {-1.25, 0.25, -1, 0.5, -0.75, 0.75, -0.5, 1, -0.25, 1.25, 0, -1.25,
          0.5, -0.75, 0.75, -0.5, 1, -0.25, 1.25, 0, -1.25, 0.25, -1, 0.5});
  // Implicit output: the letters that occur once, i and k; b and j are summed.
  expect(F::einsum("bij,bjk", {a, b}), {3, 5},
         {0, 1.125, 2.25, -7.625, -2.375, 2.375, -5.375, 0.625, 3.875, 0.25, 3.375, 1.875, -2.375, -1.125, 1.5});
  expect(F::einsum(" ... i j , ... j k -> ... i k", {a, lin({4, 2}, 0.5)}), {2, 3, 2},
         {4.875, 0.75, 0.625, -3.125, -0.875, 1.25, 0.375, -2.625, -1.125, 1.75, -1.25, 2});
  expect(F::einsum("ij,jk,k->i", {m, lin({3, 4}, 0.5), v}), {3}, {-20.875, 16.375, 13.75});
  expect(F::einsum("bij->", {a}), {}, {-0.75});
  expect(F::einsum("iji->j", {lin({3, 2, 3})}), {2}, {0, 2});
}

BOOST_AUTO_TEST_CASE(einsum_implicit_output_sorts_the_letters_once) {
  // "ba" implicit: output letters sorted, so "ab": a transpose.
  const mg::Tensor x = lin({2, 3});
  expect(F::einsum("ba", {x}), {3, 2}, values(F::transpose(x, 0, 1)));
}

BOOST_AUTO_TEST_CASE(einsum_runs_in_low_precision_under_autocast) {
  mg::amp::autocast scope(true, mg::DType::bfloat16);
  const mg::Tensor y = F::einsum("ij,jk->ik", {mg::ones({2, 3}), mg::ones({3, 4})});
  BOOST_TEST(y.dtype() == mg::DType::bfloat16);
  BOOST_TEST(values(y) == std::vector<double>(8, 3.0), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(einsum_misuse_is_a_typed_error_naming_the_op_and_operands) {
  const mg::Tensor a = mg::zeros({2, 3}), b = mg::zeros({4, 5});
  check_error<mg::ValueError>([&] { F::einsum("ij,jk->ik", {a, b}); }, {"einsum", "differ in size", "[2, 3]", "[4, 5]"});
  check_error<mg::ValueError>([&] { F::einsum("ij->i", {a, b}); }, {"einsum", "2 operands"});
  check_error<mg::ValueError>([&] { F::einsum("ijk->i", {a}); }, {"einsum", "operand 0 has 2 dims"});
  check_error<mg::ValueError>([&] { F::einsum("i1->i", {a}); }, {"einsum", "'1'"});
  check_error<mg::ValueError>([&] { F::einsum("ij->ii", {a}); }, {"einsum", "repeats in the output"});
  check_error<mg::ValueError>([&] { F::einsum("ij->k", {a}); }, {"einsum", "in no input term"});
  check_error<mg::ValueError>([&] { F::einsum("i..j->ij", {a}); }, {"einsum", "\"...\""});
  check_error<mg::ValueError>([&] { F::einsum("ii->i", {a}); }, {"einsum", "repeated subscript"});
  check_error<mg::ValueError>([&] { F::einsum("i-j", {a}); }, {"einsum", "->"});
  check_error<mg::DTypeError>([&] { F::einsum("ij,jk", {a, mg::zeros({3, 2}, mg::DType::float64)}); },
                              {"einsum", "dtypes differ", "float64"});
  check_error<mg::DTypeError>([&] { F::einsum("i", {mg::tensor<int64_t>({1, 2}, {2})}); }, {"einsum", "floating"});
  check_error<mg::ValueError>([&] { F::einsum("", {}); }, {"einsum", "at least one operand"});
}

BOOST_AUTO_TEST_CASE(addmm_activation_matches_torch) {
  const mg::Tensor a = lin({2, 3}), b = lin({3, 4}, 0.5), input = lin({4}, 1.0);
  expect(F::addmm_activation(input, a, b, {.beta = 0.5, .alpha = 2.0}), {2, 4}, {6.25, 0, 4, 0, 0, 0.5, 0, 12.5});
  expect(F::addmm_activation(input, a, b, {}, true), {2, 4},
         {-0.166241, -0.169971, 0.345731, 3.12222, -2.6104e-10, 1.6799, -0.0208394, 10});
}

BOOST_AUTO_TEST_CASE(addmm_activation_misuse_and_autocast) {
  check_error<mg::ShapeError>([] { F::addmm_activation(mg::zeros({2}), mg::zeros({2, 3}), mg::zeros({4, 2})); },
                              {"addmm_activation", "inner", "[2, 3]", "[4, 2]"});
  check_error<mg::ShapeError>([] { F::addmm_activation(mg::zeros({3}), mg::zeros({2, 3}), mg::zeros({3, 2})); },
                              {"addmm_activation", "broadcast"});
  check_error<mg::DTypeError>(
      [] { F::addmm_activation(mg::zeros({2}), mg::zeros({2, 3}), mg::zeros({3, 2}, mg::DType::float64)); },
      {"addmm_activation", "dtypes differ"});
  mg::amp::autocast scope(true, mg::DType::bfloat16);
  BOOST_TEST(F::addmm_activation(mg::ones({2}), mg::ones({2, 3}), mg::ones({3, 2})).dtype() == mg::DType::bfloat16);
}

BOOST_AUTO_TEST_SUITE_END()
