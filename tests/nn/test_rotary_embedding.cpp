// Rotary position embeddings (nn::RotaryEmbedding, F::rotary_embedding):
// values against a plain float64 loop over the elements, the relative
// position property, offsets for incremental decoding, broadcast tables,
// gradients against finite differences in float64, bfloat16 (autocast or
// not) against float32, and the errors.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "../common/test_util.hpp"

namespace {

namespace mg = mixgrad;
namespace nn = mixgrad::nn;
namespace F = mixgrad::F;
using test_util::check_close;
using test_util::check_error;
using test_util::values;

mg::Tensor randn(mg::Shape s, uint64_t seed, mg::DType dtype = mg::DType::float64) {
  mg::manual_seed(seed);
  return mg::normal(s, 0.0, 1.0, dtype);
}

/// RoPE by its definition, element by element in double, for x [..., T, D]
/// (contiguous): the pair (i, i + D/2) of position `offset + t` is rotated
/// by the angle (offset + t) * base^(-2i / D).
std::vector<double> rope_by_hand(const mg::Tensor& x, int64_t offset, double base) {
  const std::vector<double> v = values(x);
  const int64_t D = x.size(-1), T = x.size(-2), half = D / 2, rows = x.numel() / D;
  std::vector<double> y(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double pos = static_cast<double>(offset + r % T);
    for (int64_t i = 0; i < half; ++i) {
      const double angle = pos * std::pow(base, -2.0 * i / D);
      const double a = v[r * D + i], b = v[r * D + i + half];
      y[r * D + i] = a * std::cos(angle) - b * std::sin(angle);
      y[r * D + i + half] = b * std::cos(angle) + a * std::sin(angle);
    }
  }
  return y;
}

void check_values(const mg::Tensor& got, const std::vector<double>& want, double tol) {
  const std::vector<double> g = values(got);
  BOOST_TEST_REQUIRE(g.size() == want.size());
  for (size_t i = 0; i < g.size(); ++i)
    BOOST_TEST(std::abs(g[i] - want[i]) <= tol * (1 + std::abs(want[i])), "element " << i << ": " << g[i] << " vs "
                                                                                       << want[i]);
}

double dot(const mg::Tensor& a, const mg::Tensor& b) { return F::sum(F::mul(a, b)).item<double>(); }

}  // namespace

BOOST_AUTO_TEST_SUITE(rotary_embedding)

BOOST_AUTO_TEST_CASE(values_match_the_definition) {
  for (double base : {10000.0, 500.0}) {
    BOOST_TEST_CONTEXT("base " << base) {
      nn::RotaryEmbedding rope(8, {.base = base, .max_positions = 64});
      const auto x = randn({2, 3, 5, 8}, 1);
      check_values(rope.rotate(x, 0), rope_by_hand(x, 0, base), 1e-12);
      check_values(rope.rotate(x, 9), rope_by_hand(x, 9, base), 1e-12);
      // float32 in, float32 out, float32 tables.
      const auto x32 = F::astype(x, mg::DType::float32);
      const auto y32 = rope.rotate(x32, 9);
      BOOST_TEST((y32.dtype() == mg::DType::float32));
      check_values(y32, rope_by_hand(x32, 9, base), 1e-6);
      // q and k are rotated alike, each with its own head count.
      const auto k = randn({2, 1, 5, 8}, 2);
      const auto [q2, k2] = rope(x, k, 4);
      check_values(q2, rope_by_hand(x, 4, base), 1e-12);
      check_values(k2, rope_by_hand(k, 4, base), 1e-12);
    }
  }
}

BOOST_AUTO_TEST_CASE(tables_are_the_cosines_and_sines_of_the_angles) {
  nn::RotaryEmbedding rope(6, {.max_positions = 4096});
  const auto [cos, sin] = rope.tables(4000, 3);
  BOOST_TEST(mg::to_string(cos.shape()) == "[3, 3]");
  BOOST_TEST((cos.dtype() == mg::DType::float32));
  const auto c = values(cos), s = values(sin);
  for (int64_t p = 0; p < 3; ++p)
    for (int64_t i = 0; i < 3; ++i) {
      const double angle = (4000.0 + p) * std::pow(10000.0, -2.0 * i / 6);
      // float32 rounding of the value, not of the angle (4000 * 1 rad would lose ~2e-4 in float32)
      BOOST_TEST(std::abs(c[p * 3 + i] - std::cos(angle)) <= 1e-7);
      BOOST_TEST(std::abs(s[p * 3 + i] - std::sin(angle)) <= 1e-7);
    }
  const auto [c64, s64] = rope.tables(4000, 3, mg::Device::cpu(), mg::DType::float64);
  BOOST_TEST((c64.dtype() == mg::DType::float64));
  BOOST_TEST(std::abs(values(c64)[4] - std::cos(4001.0 * std::pow(10000.0, -2.0 / 6))) <= 1e-15);
}

// dot(rope(q, m), rope(k, n)) depends on m - n only.
BOOST_AUTO_TEST_CASE(scores_depend_on_the_relative_position_only) {
  nn::RotaryEmbedding rope(16, {.max_positions = 512});
  const auto q = randn({1, 1, 1, 16}, 3), k = randn({1, 1, 1, 16}, 4);
  auto score = [&](int64_t m, int64_t n) { return dot(rope.rotate(q, m), rope.rotate(k, n)); };
  const double at_3 = score(3, 0);
  for (auto [m, n] : {std::pair<int64_t, int64_t>{5, 2}, {40, 37}, {300, 297}, {511, 508}})
    BOOST_TEST(std::abs(score(m, n) - at_3) <= 1e-10 * (1 + std::abs(at_3)), m << " - " << n);
  // Another distance gives another score, and the rotation keeps lengths.
  BOOST_TEST(std::abs(score(5, 3) - at_3) > 1e-3);
  BOOST_TEST(std::abs(dot(rope.rotate(q, 77), rope.rotate(q, 77)) - dot(q, q)) <= 1e-12 * dot(q, q));
}

// Incremental decoding: the tokens at positions t0 .. t0 + L - 1, rotated
// alone with offset t0, are what they are in the whole sequence.
BOOST_AUTO_TEST_CASE(an_offset_continues_the_sequence) {
  nn::RotaryEmbedding rope(8, {.max_positions = 32});
  const auto x = randn({2, 2, 10, 8}, 5);
  const auto whole = rope.rotate(x);
  for (auto [t0, len] : {std::pair<int64_t, int64_t>{0, 10}, {3, 4}, {9, 1}}) {
    const auto part = rope.rotate(F::narrow(x, 2, t0, len), t0);
    BOOST_TEST(values(part) == values(F::narrow(whole, 2, t0, len)), boost::test_tools::per_element());
  }
  // Not the same as rotating from position 0.
  const bool same_from_zero = values(rope.rotate(F::narrow(x, 2, 3, 4))) == values(F::narrow(whole, 2, 3, 4));
  BOOST_TEST(!same_from_zero);
  // The last position that fits.
  BOOST_TEST(rope.rotate(F::narrow(x, 2, 0, 2), 30).shape() == mg::Shape({2, 2, 2, 8}));
}

// F::rotary_embedding broadcasts its tables: a batch whose rows start at
// different positions (left-padded prompts, say) takes [B, 1, T, D/2] tables.
BOOST_AUTO_TEST_CASE(tables_broadcast_over_leading_dims) {
  nn::RotaryEmbedding rope(4, {.max_positions = 16});
  const auto x = randn({2, 3, 5, 4}, 6);
  const auto [c0, s0] = rope.tables(0, 5, mg::Device::cpu(), mg::DType::float64);
  const auto [c7, s7] = rope.tables(7, 5, mg::Device::cpu(), mg::DType::float64);
  const auto cos = F::unsqueeze(F::stack({c0, c7}), 1), sin = F::unsqueeze(F::stack({s0, s7}), 1);
  const auto y = F::rotary_embedding(x, cos, sin);
  check_values(F::narrow(y, 0, 0, 1), rope_by_hand(F::narrow(x, 0, 0, 1), 0, 10000.0), 1e-12);
  check_values(F::narrow(y, 0, 1, 1), rope_by_hand(F::narrow(x, 0, 1, 1).contiguous(), 7, 10000.0), 1e-12);
}

BOOST_AUTO_TEST_CASE(gradients_match_finite_differences_in_float64) {
  nn::RotaryEmbedding rope(6, {.max_positions = 16});
  const auto q = randn({2, 2, 3, 6}, 7), k = randn({2, 1, 3, 6}, 8);
  const auto wq = randn({2, 2, 3, 6}, 9), wk = randn({2, 1, 3, 6}, 10);
  auto loss = [&] {
    const auto [q2, k2] = rope(q, k, 5);
    return F::add(F::sum(F::mul(q2, wq)), F::sum(F::mul(k2, wk)));
  };
  mg::autodiff::GradManager gm;
  gm.attach({q, k});
  {
    auto rec = gm.record();
    gm.backward(loss());
  }
  auto value = [&] { return loss().item<double>(); };
  BOOST_TEST_CONTEXT("q") { test_util::check_finite_differences(q, q.grad(), value); }
  BOOST_TEST_CONTEXT("k") { test_util::check_finite_differences(k, k.grad(), value); }
}

BOOST_AUTO_TEST_CASE(bfloat16_in_bfloat16_out_close_to_float32) {
  nn::RotaryEmbedding rope(8, {.max_positions = 64});
  const auto x = randn({2, 2, 6, 8}, 11, mg::DType::float32);
  const auto want = rope.rotate(x, 20);
  const auto got = rope.rotate(F::astype(x, mg::DType::bfloat16), 20);
  BOOST_TEST((got.dtype() == mg::DType::bfloat16));
  check_close(F::astype(got, mg::DType::float32), want, 2e-2);

  // Under autocast: a query from a bf16 product stays bf16, and the
  // gradient reaches the float32 weight in float32.
  mg::Tensor w = randn({8, 8}, 12, mg::DType::float32);
  const auto want_q = rope.rotate(F::reshape(F::linear(F::reshape(x, {24, 8}), w), {2, 2, 6, 8}), 20);
  mg::autodiff::GradManager gm;
  gm.attach({w});
  mg::Tensor q;
  {
    auto rec = gm.record();
    mg::amp::autocast scope(true, mg::DType::bfloat16);
    const auto proj = F::reshape(F::linear(F::reshape(x, {24, 8}), w), {2, 2, 6, 8});
    BOOST_TEST_REQUIRE((proj.dtype() == mg::DType::bfloat16));
    q = rope.rotate(proj, 20);
    gm.backward(F::sum(F::astype(q, mg::DType::float32)));
  }
  BOOST_TEST((q.dtype() == mg::DType::bfloat16));
  check_close(F::astype(q, mg::DType::float32), want_q, 5e-2);
  BOOST_TEST((w.grad().dtype() == mg::DType::float32));
  BOOST_TEST(std::isfinite(F::sum(w.grad()).item<float>()));
}

BOOST_AUTO_TEST_CASE(bad_input_throws_naming_the_op_shapes_and_dtypes) {
  BOOST_CHECK_THROW(nn::RotaryEmbedding(7), mg::ValueError);
  BOOST_CHECK_THROW(nn::RotaryEmbedding(0), mg::ValueError);
  BOOST_CHECK_THROW(nn::RotaryEmbedding(8, {.base = 1.0}), mg::ValueError);
  BOOST_CHECK_THROW(nn::RotaryEmbedding(8, {.max_positions = 0}), mg::ValueError);

  nn::RotaryEmbedding rope(8, {.max_positions = 16});
  const auto q = randn({1, 2, 5, 8}, 13, mg::DType::float32);
  check_error<mg::ShapeError>([&] { rope.rotate(randn({1, 2, 5, 6}, 14, mg::DType::float32)); },
                              {"RotaryEmbedding(head_dim=8", "[B, H, T, 8]", "float32[1, 2, 5, 6]"});
  check_error<mg::ShapeError>([&] { rope.rotate(randn({2, 5, 8}, 15, mg::DType::float32)); },
                              {"RotaryEmbedding", "[B, H, T, 8]", "float32[2, 5, 8]"});
  check_error<mg::ShapeError>([&] { rope(q, q, 12); },
                              {"RotaryEmbedding", "positions 12 to 16", "max_positions = 16", "float32[1, 2, 5, 8]"});
  check_error<mg::ValueError>([&] { rope.rotate(q, -1); }, {"RotaryEmbedding", "offset", "-1"});
  check_error<mg::DTypeError>([&] { rope.rotate(mg::zeros({1, 2, 5, 8}, mg::DType::int64)); },
                              {"RotaryEmbedding", "floating", "int64[1, 2, 5, 8]"});
  // k is checked before q is rotated.
  check_error<mg::ShapeError>([&] { rope(q, randn({1, 2, 5, 4}, 16, mg::DType::float32)); },
                              {"RotaryEmbedding", "k float32[1, 2, 5, 4]"});
  check_error<mg::ShapeError>([&] { (void)rope.tables(10, 7); }, {"RotaryEmbedding", "max_positions = 16"});
  check_error<mg::DTypeError>([&] { (void)rope.tables(0, 2, mg::Device::cpu(), mg::DType::bfloat16); },
                              {"RotaryEmbedding", "bfloat16"});

  // The function, with tables of its own (not a structured binding: lambdas
  // capture those only from C++20 compilers newer than clang 14's).
  const auto tables = rope.tables(0, 5);
  const mg::Tensor cos = tables.first, sin = tables.second;
  check_error<mg::ShapeError>([&] { F::rotary_embedding(randn({1, 5, 7}, 17, mg::DType::float32), cos, sin); },
                              {"rotary_embedding", "even", "x float32[1, 5, 7]", "cos float32[5, 4]"});
  check_error<mg::ShapeError>([&] { F::rotary_embedding(randn({1, 6, 8}, 18, mg::DType::float32), cos, sin); },
                              {"rotary_embedding", "[..., 6, 4]", "x float32[1, 6, 8]"});
  check_error<mg::ShapeError>([&] { F::rotary_embedding(q, cos, F::narrow(sin, 0, 0, 4)); },
                              {"rotary_embedding", "same shape", "sin float32[4, 4]"});
  check_error<mg::ShapeError>([&] { F::rotary_embedding(randn({8}, 19, mg::DType::float32), cos, sin); },
                              {"rotary_embedding", "2-D", "x float32[8]"});
  check_error<mg::ShapeError>(
      [&] { F::rotary_embedding(q, F::unsqueeze(F::stack({cos, cos, cos}), 1), F::unsqueeze(F::stack({sin, sin, sin}), 1)); },
      {"rotary_embedding", "broadcast", "cos float32[3, 1, 5, 4]"});
  check_error<mg::DTypeError>([&] { F::rotary_embedding(mg::zeros({1, 5, 8}, mg::DType::int32), cos, sin); },
                              {"rotary_embedding", "floating", "x int32[1, 5, 8]", "float32[5, 4]"});
}

BOOST_AUTO_TEST_SUITE_END()
