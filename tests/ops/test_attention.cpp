// Focused tests of F::scaled_dot_product_attention beyond the op registry
// (which checks gradients by finite differences, low precision and second
// derivatives): values against a direct float64 loop, rows that see no key,
// the instruction-set variants, memory that does not grow with L x S,
// autocast, dropout, and the errors.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "core/simd.hpp"
#include "mixgrad/mixgrad.hpp"
#include "../common/test_util.hpp"

namespace {

namespace mg = mixgrad;
namespace F = mixgrad::F;
using test_util::message_has;
using test_util::values;

mg::Tensor randn(mg::Shape s, uint64_t seed, mg::DType dt = mg::DType::float64) {
  mg::manual_seed(seed);
  return mg::normal(s, 0.0, 1.0, dt);
}

/// softmax(q k^T scale + mask) v by loops, in double, for [B, H, L, E]
/// inputs with k / v of Hk heads; keep(b, h, i, j) and add(b, h, i, j) give
/// the mask. A row with no key gives 0.
template <class Keep, class Add>
std::vector<double> reference(const mg::Tensor& q, const mg::Tensor& k, const mg::Tensor& v, double scale, Keep keep,
                              Add add) {
  const auto Q = values(q), K = values(k), V = values(v);
  const int64_t B = q.shape()[0], H = q.shape()[1], L = q.shape()[2], E = q.shape()[3];
  const int64_t Hk = k.shape()[1], S = k.shape()[2], Ev = v.shape()[3];
  std::vector<double> out(B * H * L * Ev, 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h / (H / Hk);
      for (int64_t i = 0; i < L; ++i) {
        std::vector<double> s(S, -std::numeric_limits<double>::infinity());
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < S; ++j) {
          if (!keep(b, h, i, j)) continue;
          double d = 0;
          for (int64_t e = 0; e < E; ++e) d += Q[((b * H + h) * L + i) * E + e] * K[((b * Hk + hk) * S + j) * E + e];
          s[j] = d * scale + add(b, h, i, j);
          mx = std::max(mx, s[j]);
        }
        if (mx == -std::numeric_limits<double>::infinity()) continue;
        double z = 0;
        for (int64_t j = 0; j < S; ++j) z += std::exp(s[j] - mx);
        for (int64_t j = 0; j < S; ++j) {
          const double p = std::exp(s[j] - mx) / z;
          for (int64_t c = 0; c < Ev; ++c) out[((b * H + h) * L + i) * Ev + c] += p * V[((b * Hk + hk) * S + j) * Ev + c];
        }
      }
    }
  return out;
}

auto all_keys = [](int64_t, int64_t, int64_t, int64_t) { return true; };
auto no_bias = [](int64_t, int64_t, int64_t, int64_t) { return 0.0; };

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  BOOST_TEST_REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i)
    BOOST_TEST(std::abs(got[i] - want[i]) <= tol * (1.0 + std::abs(want[i])),
               "element " << i << ": " << got[i] << " vs " << want[i]);
}

/// y = F::scaled_dot_product_attention(q, k, v, options), recorded, and the
/// backward of sum(y): q, k and v receive their gradients.
mg::Tensor attention_with_grads(mg::Tensor& q, mg::Tensor& k, mg::Tensor& v, const F::AttentionOptions& options) {
  mg::autodiff::GradManager gm;
  gm.attach({q, k, v});
  auto rec = gm.record();
  mg::Tensor y = F::scaled_dot_product_attention(q, k, v, options);
  gm.backward(F::sum(y));
  return y;
}

/// Every gradient of q, k and v is finite.
void check_finite_grads(const mg::Tensor& q, const mg::Tensor& k, const mg::Tensor& v) {
  for (const auto* t : {&q, &k, &v})
    for (double g : values(t->grad())) BOOST_TEST(std::isfinite(g));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(attention)

// Lengths that cross the kernel's 128-row blocks, Ev != E, in float32 and float64.
BOOST_AUTO_TEST_CASE(values_match_a_direct_loop) {
  for (auto dt : {mg::DType::float64, mg::DType::float32}) {
    const auto q = randn({2, 2, 140, 16}, 1, dt), k = randn({2, 2, 300, 16}, 2, dt), v = randn({2, 2, 300, 24}, 3, dt);
    const double tol = dt == mg::DType::float64 ? 1e-12 : 2e-5;
    check_close(values(F::scaled_dot_product_attention(q, k, v)), reference(q, k, v, 0.25, all_keys, no_bias), tol);
  }
}

BOOST_AUTO_TEST_CASE(causal_is_top_left_aligned) {
  const auto q = randn({1, 2, 133, 8}, 4), k = randn({1, 2, 260, 8}, 5), v = randn({1, 2, 260, 8}, 6);
  const auto y = F::scaled_dot_product_attention(q, k, v, {.is_causal = true});
  auto causal = [](int64_t, int64_t, int64_t i, int64_t j) { return j <= i; };
  check_close(values(y), reference(q, k, v, 1.0 / std::sqrt(8.0), causal, no_bias), 1e-12);
}

BOOST_AUTO_TEST_CASE(masks_broadcast_and_gqa_share_heads) {
  const auto q = randn({2, 4, 9, 8}, 7), k = randn({2, 2, 11, 8}, 8), v = randn({2, 2, 11, 5}, 9);
  // bool [B, 1, L, S]: per batch, broadcast over heads
  std::vector<bool> keep_v(2 * 9 * 11);
  for (size_t e = 0; e < keep_v.size(); ++e) keep_v[e] = (e * 7) % 3 != 0;
  const auto keep = mg::tensor<bool>(keep_v, {2, 1, 9, 11});
  auto keep_fn = [&](int64_t b, int64_t, int64_t i, int64_t j) { return bool(keep_v[(b * 9 + i) * 11 + j]); };
  check_close(values(F::scaled_dot_product_attention(q, k, v, {.attn_mask = keep, .enable_gqa = true})),
              reference(q, k, v, 1.0 / std::sqrt(8.0), keep_fn, no_bias), 1e-12);
  // additive [L, S], transposed (a strided view)
  const auto bias_t = randn({11, 9}, 10);
  const auto bias = F::transpose(bias_t, 0, 1);
  const auto bv = values(bias_t);
  auto add_fn = [&](int64_t, int64_t, int64_t i, int64_t j) { return bv[j * 9 + i]; };
  check_close(values(F::scaled_dot_product_attention(q, k, v, {.attn_mask = bias, .scale = 0.3, .enable_gqa = true})),
              reference(q, k, v, 0.3, all_keys, add_fn), 1e-12);
}

// PyTorch >= 2.5: a fully masked row gives 0, and its gradients are 0, not NaN.
BOOST_AUTO_TEST_CASE(a_row_that_sees_no_key_is_zero_with_zero_gradient) {
  auto q = randn({1, 1, 3, 4}, 11), k = randn({1, 1, 5, 4}, 12), v = randn({1, 1, 5, 4}, 13);
  const auto keep = mg::tensor<bool>({true, true, false, true, false,  //
                                      false, false, false, false, false,  // row 1 sees nothing
                                      true, true, true, true, true},
                                     {3, 5});
  const auto yv = values(attention_with_grads(q, k, v, {.attn_mask = keep}));
  for (int c = 0; c < 4; ++c) BOOST_TEST(yv[4 + c] == 0.0);
  check_finite_grads(q, k, v);
  const auto gq = values(q.grad());
  for (int c = 0; c < 4; ++c) BOOST_TEST(gq[4 + c] == 0.0);
}

// The portable, AVX2 and AVX-512 builds of the kernel agree (they differ
// only in FMA contraction) in the forward and every gradient.
BOOST_AUTO_TEST_CASE(instruction_set_variants_agree) {
  const auto q0 = randn({1, 3, 150, 32}, 14, mg::DType::float32), k0 = randn({1, 3, 170, 32}, 15, mg::DType::float32),
             v0 = randn({1, 3, 170, 32}, 16, mg::DType::float32);
  auto run = [&](mg::simd::Level level) {
    mg::simd::LevelScope scope(level);
    auto q = q0.clone(), k = k0.clone(), v = v0.clone();
    mg::autodiff::GradManager gm;
    gm.attach({q, k, v});
    std::vector<std::vector<double>> r;
    {
      auto rec = gm.record();
      const auto y = F::scaled_dot_product_attention(q, k, v, {.is_causal = true});
      r.push_back(values(y));
      gm.backward(y, randn(y.shape(), 17, mg::DType::float32));
    }
    for (const auto* t : {&q, &k, &v}) r.push_back(values(t->grad()));
    return r;
  };
  const auto base = run(mg::simd::Level::portable);
  for (auto level : {mg::simd::Level::avx2, mg::simd::Level::avx512}) {
    if (level > mg::simd::available()) continue;
    const auto got = run(level);
    for (size_t t = 0; t < base.size(); ++t) check_close(got[t], base[t], 1e-5);
  }
}

// Where bfloat16 attention multiplies its input pairs on vdpbf16ps
// (simd::bf16_dot_products(): AMD Zen 4/5, or any CPU with AVX512-BF16 under
// MIXGRAD_MAX_CPU_ISA=all, as the ops_bf16_all run sets), those products
// are exact and only the order of their sums differs from the float FMAs
// of the AVX2 kernel: the forward and every gradient agree to bfloat16's
// rounding, causal or not, with odd head dims (a zero-padded pair) and
// grouped key / value heads.
BOOST_AUTO_TEST_CASE(bfloat16_pair_products_agree_with_float_arithmetic) {
  if (!mg::simd::bf16_dot_products()) {
    BOOST_TEST_MESSAGE("bfloat16 pair products are not used on this CPU: nothing to compare");
    return;
  }
  for (const int64_t E : {15, 64})
    for (const bool causal : {false, true}) {
      BOOST_TEST_CONTEXT("E " << E << (causal ? ", causal" : "")) {
        const auto q0 = randn({1, 4, 150, E}, 41, mg::DType::bfloat16),
                   k0 = randn({1, 2, 170, E}, 42, mg::DType::bfloat16),
                   v0 = randn({1, 2, 170, E + 2}, 43, mg::DType::bfloat16);
        auto run = [&](bool pairs) {
          std::optional<mg::simd::LevelScope> scope;
          if (!pairs) scope.emplace(mg::simd::Level::avx2);
          BOOST_TEST(mg::simd::bf16_dot_products() == pairs);
          auto q = q0.clone(), k = k0.clone(), v = v0.clone();
          mg::autodiff::GradManager gm;
          gm.attach({q, k, v});
          std::vector<std::vector<double>> r;
          {
            auto rec = gm.record();
            const auto y = F::scaled_dot_product_attention(q, k, v, {.is_causal = causal, .enable_gqa = true});
            r.push_back(values(y));
            gm.backward(y, randn(y.shape(), 44, mg::DType::bfloat16));
          }
          for (const auto* t : {&q, &k, &v}) r.push_back(values(t->grad()));
          return r;
        };
        const auto floats = run(false), pairs = run(true);
        for (size_t t = 0; t < floats.size(); ++t) {
          double scale = 0;
          for (double x : floats[t]) scale = std::max(scale, std::fabs(x));
          size_t off = 0;
          for (size_t i = 0; i < floats[t].size(); ++i)
            off += std::fabs(pairs[t][i] - floats[t][i]) > std::ldexp(std::fabs(floats[t][i]), -7) + 1e-3 * scale;
          BOOST_TEST(off == 0u, "tensor " << t << ": " << off << " of " << floats[t].size() << " elements differ");
        }
      }
    }
}

// float32 at every instruction set, with a mask that leaves some queries
// no key (inside a vector of queries and in the tail) and lets others see
// their first key only in a later key block: the forward keeps each query's
// softmax statistics in vector lanes, and a lane that has seen nothing yet
// must stay 0 without turning its neighbours or itself into NaN.
BOOST_AUTO_TEST_CASE(float32_queries_that_see_nothing_or_start_late_at_every_level) {
  const int64_t L = 40, S = 300, E = 16;
  const auto q = randn({1, 2, L, E}, 27, mg::DType::float32), k = randn({1, 2, S, E}, 28, mg::DType::float32),
             v = randn({1, 2, S, E}, 29, mg::DType::float32);
  auto sees = [](int64_t i, int64_t j) { return i % 5 != 3 && j >= (i * 7) % 200; };
  const mg::Tensor keep = mg::zeros({L, S}, mg::DType::bool_);
  auto* kp = static_cast<bool*>(keep.raw_data());
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < S; ++j) kp[i * S + j] = sees(i, j);
  const auto want = reference(q, k, v, 0.25, [&](int64_t, int64_t, int64_t i, int64_t j) { return sees(i, j); },
                              no_bias);
  for (auto level : {mg::simd::Level::portable, mg::simd::Level::avx2, mg::simd::Level::avx512}) {
    if (level > mg::simd::available()) continue;
    mg::simd::LevelScope scope(level);
    auto qa = q.clone(), ka = k.clone(), va = v.clone();
    const auto got = values(attention_with_grads(qa, ka, va, {.attn_mask = keep}));
    check_close(got, want, 1e-5);
    const auto gq = values(qa.grad());
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 3; i < L; i += 5)
        for (int64_t c = 0; c < E; ++c) {
          BOOST_TEST(got[(h * L + i) * E + c] == 0.0);
          BOOST_TEST(gq[(h * L + i) * E + c] == 0.0);
        }
    check_finite_grads(qa, ka, va);
  }
}

// The fused path never holds [L, S]: forward and backward of 2048 x 2048
// allocate far less than the 16 MB one float32 score matrix would take.
BOOST_AUTO_TEST_CASE(memory_does_not_grow_with_length_squared) {
  const int64_t L = 2048;
  auto q = randn({1, 1, L, 16}, 18, mg::DType::float32), k = randn({1, 1, L, 16}, 19, mg::DType::float32),
       v = randn({1, 1, L, 16}, 20, mg::DType::float32);
  mg::autodiff::GradManager gm;
  gm.attach({q, k, v});
  const int64_t before = mg::allocated_bytes();
  mg::reset_peak_allocated_bytes();
  {
    auto rec = gm.record();
    gm.backward(F::sum(F::scaled_dot_product_attention(q, k, v, {.is_causal = true})));
  }
  const int64_t extra = mg::peak_allocated_bytes() - before;
  BOOST_TEST(extra < L * L * 4 / 8, "peak extra bytes " << extra);
}

BOOST_AUTO_TEST_CASE(autocast_runs_it_in_low_precision) {
  const auto q = randn({2, 2, 33, 16}, 21, mg::DType::float32), k = randn({2, 2, 40, 16}, 22, mg::DType::float32),
             v = randn({2, 2, 40, 16}, 23, mg::DType::float32);
  const auto want = values(F::scaled_dot_product_attention(q, k, v));
  for (auto dt : {mg::DType::bfloat16, mg::DType::float16}) {
    mg::amp::autocast scope(true, dt);
    const auto y = F::scaled_dot_product_attention(q, k, v);
    BOOST_TEST(y.dtype() == dt);
    check_close(values(y), want, dt == mg::DType::bfloat16 ? 3e-2 : 5e-3);
  }
}

// Dropout runs the composed math with the global generator: reproducible
// under a seed, different from no dropout, and differentiable.
BOOST_AUTO_TEST_CASE(dropout_is_seeded_and_differentiable) {
  auto q = randn({1, 2, 6, 4}, 24), k = randn({1, 2, 6, 4}, 25), v = randn({1, 2, 6, 4}, 26);
  auto run = [&] {
    mg::manual_seed(5);
    return values(F::scaled_dot_product_attention(q, k, v, {.dropout_p = 0.5}));
  };
  const auto a = run(), b = run();
  BOOST_TEST(a == b);
  BOOST_TEST(a != values(F::scaled_dot_product_attention(q, k, v)));
  mg::autodiff::GradManager gm;
  gm.attach({q});
  {
    auto rec = gm.record();
    gm.backward(F::sum(F::scaled_dot_product_attention(q, k, v, {.dropout_p = 0.5})));
  }
  BOOST_TEST(q.grad().defined());
}

// The composed math that stands in for the fused kernel (dropout here; on
// CUDA, what cuDNN does not take) runs 16-bit inputs in float32 and rounds
// the output once, as the kernel does, also under autocast: it agrees with
// the fused kernel to the output's rounding, where scores and weights
// rounded to 16 bits would not.
BOOST_AUTO_TEST_CASE(the_composed_fallback_computes_16_bit_inputs_in_float32) {
  const auto q = randn({2, 2, 33, 16}, 31, mg::DType::float32), k = randn({2, 2, 40, 16}, 32, mg::DType::float32),
             v = randn({2, 2, 40, 16}, 33, mg::DType::float32);
  for (auto dt : {mg::DType::bfloat16, mg::DType::float16}) {
    BOOST_TEST_CONTEXT("dtype " << dt) {
      mg::amp::autocast scope(true, dt);
      const auto fused = F::scaled_dot_product_attention(q, k, v);
      mg::manual_seed(3);
      const auto composed = F::scaled_dot_product_attention(q, k, v, {.dropout_p = 1e-12});  // drops nothing
      BOOST_TEST(composed.dtype() == dt);
      const auto a = values(composed), b = values(fused);
      const double ulp = dt == mg::DType::bfloat16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10);  // one unit in the last place
      for (size_t i = 0; i < a.size(); ++i)
        BOOST_TEST(std::fabs(a[i] - b[i]) <= ulp * std::fabs(b[i]) + 1e-6, "element " << i << ": " << a[i] << " vs " << b[i]);
    }
  }
}

BOOST_AUTO_TEST_CASE(bad_inputs_name_the_op_and_shapes) {
  const auto q = randn({1, 4, 5, 8}, 27, mg::DType::float32), k = randn({1, 2, 6, 8}, 28, mg::DType::float32),
             v = randn({1, 2, 6, 8}, 29, mg::DType::float32);
  try {
    F::scaled_dot_product_attention(q, k, v);
    BOOST_FAIL("different head counts without enable_gqa were accepted");
  } catch (const mg::ShapeError& e) {
    BOOST_TEST(message_has(e, {"scaled_dot_product_attention", "enable_gqa", "float32[1, 4, 5, 8]", "float32[1, 2, 6, 8]"}),
               e.what());
  }
  const auto k8 = randn({1, 4, 6, 7}, 30, mg::DType::float32);
  BOOST_CHECK_THROW(F::scaled_dot_product_attention(q, k8, k8), mg::ShapeError);  // E differs
  BOOST_CHECK_THROW(F::scaled_dot_product_attention(q, F::astype(k, mg::DType::float64), v, {.enable_gqa = true}),
                    mg::DTypeError);
  const auto keep = mg::ones({5, 6}, mg::DType::bool_);
  BOOST_CHECK_THROW(F::scaled_dot_product_attention(q, k, v, {.attn_mask = keep, .is_causal = true, .enable_gqa = true}),
                    mg::ValueError);
  try {
    F::scaled_dot_product_attention(q, k, v, {.attn_mask = mg::ones({5, 7}, mg::DType::bool_), .enable_gqa = true});
    BOOST_FAIL("a mask that does not broadcast was accepted");
  } catch (const mg::ShapeError& e) {
    BOOST_TEST(message_has(e, {"attn_mask", "bool[5, 7]", "[1, 4, 5, 6]"}), e.what());
  }
  BOOST_CHECK_THROW(F::scaled_dot_product_attention(q, k, v, {.dropout_p = 1.5, .enable_gqa = true}), mg::ValueError);
  BOOST_CHECK_THROW(F::scaled_dot_product_attention(q, k, v, {.attn_mask = mg::ones({5, 6}, mg::DType::int32),
                                                              .enable_gqa = true}),
                    mg::DTypeError);
}

BOOST_AUTO_TEST_SUITE_END()
