// mg::cpu::capabilities() and the float32 route of 16-bit products on a CPU
// without 16-bit math (simd::LevelScope(avx2) gives that route on any
// machine): the route's results against float32, through transposed and
// sliced operands; autocast's products and convolutions on float32 weights
// (and, under RoundedProducts, on cast ones); the choice of 16-bit math where
// it pays; and the MIXGRAD_MAX_CPU_ISA cap, which the `ops_avx2` and
// `ops_bf16_all` runs set (MIXGRAD_EXPECT_CAP says what they set).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/onednn/onednn.hpp"
#include "core/simd.hpp"
#include "hooks/op_hooks.hpp"
#include "mixgrad/mixgrad.hpp"

namespace {

namespace mg = mixgrad;
namespace F = mg::F;
using mg::DType;
using mg::Tensor;

std::vector<float> values(const Tensor& t) {
  const Tensor c = t.to(DType::float32).contiguous();
  return {c.data<float>(), c.data<float>() + c.numel()};
}

// Largest |a - b| / (1 + |b|) over the elements.
double max_relative_error(const Tensor& a, const Tensor& b) {
  const auto x = values(a), y = values(b);
  BOOST_REQUIRE_EQUAL(x.size(), y.size());
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]) / (1.0 + std::abs(y[i])));
  return worst;
}

bool same_values(const Tensor& a, const Tensor& b) { return values(a) == values(b); }

}  // namespace

BOOST_AUTO_TEST_SUITE(cpu_capabilities)

BOOST_AUTO_TEST_CASE(describe_names_the_cpu_and_what_runs_on_it) {
  const mg::cpu::Capabilities caps = mg::cpu::capabilities();
  const std::string line = mg::cpu::describe(caps);
  BOOST_TEST(!caps.model.empty());
  BOOST_TEST(line.find(caps.model) == 0u);
  BOOST_TEST(line.find("kernels " + caps.kernels) != std::string::npos);
  BOOST_TEST((caps.kernels == "portable" || caps.kernels == "avx2" || caps.kernels == "avx512"));
  BOOST_TEST(line.find(caps.bf16_math ? "bfloat16 math native" : "bfloat16 computed in float32") != std::string::npos);
  BOOST_TEST(!mg::cpu::has_fast_math(DType::float16));  // oneDNN 2.6 has no float16 CPU kernels
  BOOST_TEST(mg::cpu::has_fast_math(DType::float32));
  BOOST_TEST(mg::cpu::has_fast_math(DType::bfloat16) == caps.bf16_math);
  if (mg::backend::onednn::built()) BOOST_TEST(!caps.onednn.empty());
  // 16-bit math needs the instructions.
  if (caps.bf16_math) BOOST_TEST((caps.avx512_bf16 || caps.amx_bf16));
  // The dot-product rate is measured exactly where there is something to
  // measure, and the line says it.
  const bool measurable = caps.avx512_bf16 && mg::simd::detected() == mg::simd::Level::avx512;
  BOOST_TEST((caps.bf16_dot_speedup > 0) == measurable);
  BOOST_TEST((line.find("vdpbf16ps at") != std::string::npos) == measurable);
}

// Without a cap, bfloat16 products go to the 16-bit units only where those
// beat float32: AMX, or vdpbf16ps at 1.25x the FMA rate or more. A Xeon
// without AMX (vdpbf16ps at half the FMA rate) computes them in float32.
BOOST_AUTO_TEST_CASE(bfloat16_math_is_used_only_where_it_pays) {
  const mg::cpu::Capabilities caps = mg::cpu::capabilities();
  if (caps.bf16_dot_speedup > 0) {
    // A throughput ratio of two register-only loops: about 0.5 or 2 on the
    // CPUs known, never outside this range.
    BOOST_TEST(caps.bf16_dot_speedup > 0.1);
    BOOST_TEST(caps.bf16_dot_speedup < 10.0);
  }
  const bool pays = caps.amx_bf16 || caps.bf16_dot_speedup >= mg::simd::kBf16DotPays;
  BOOST_TEST(mg::simd::bf16_math_pays() == pays);
  if (std::getenv("MIXGRAD_MAX_CPU_ISA") == nullptr && caps.kernels == "avx512")
    BOOST_TEST(caps.bf16_math == (mg::simd::has_bf16_dot() && pays));
}

BOOST_AUTO_TEST_CASE(the_process_cap_is_in_effect) {
  const char* expected = std::getenv("MIXGRAD_EXPECT_CAP");
  const mg::cpu::Capabilities caps = mg::cpu::capabilities();
  if (expected == nullptr) {
    if (std::getenv("MIXGRAD_MAX_CPU_ISA") == nullptr) BOOST_TEST(caps.max_isa.empty());  // no cap, none reported
    return;
  }
  BOOST_TEST(caps.max_isa == std::string(expected));
  if (std::string(expected) == "all") {
    // No cap, and 16-bit math wherever the instructions are, paying or not:
    // how `ops_bf16_all` tests the 16-bit route on a CPU that would not take it.
    BOOST_TEST(caps.kernels == std::string(mg::simd::to_string(mg::simd::detected())));
    BOOST_TEST(caps.bf16_math == (mg::simd::has_bf16_dot() && mg::simd::detected() == mg::simd::Level::avx512));
    return;
  }
  BOOST_TEST(caps.kernels != "avx512");
  BOOST_TEST(!caps.bf16_math);
  BOOST_TEST(!mg::cpu::has_fast_math(DType::bfloat16));
  // A level scope cannot raise the kernels above the cap.
  mg::simd::LevelScope all(mg::simd::Level::avx512);
  BOOST_TEST(mg::cpu::capabilities().kernels != "avx512");
  // oneDNN is capped too: its effective ISA is AVX2 or less.
  if (mg::backend::onednn::built() && std::string(expected) == "avx2") {
    BOOST_TEST(caps.onednn.find("avx512") == std::string::npos, caps.onednn);
    BOOST_TEST(caps.onednn.find("amx") == std::string::npos, caps.onednn);
  }
}

BOOST_AUTO_TEST_CASE(a_level_scope_turns_16_bit_math_off) {
  mg::simd::LevelScope avx2(mg::simd::Level::avx2);
  BOOST_TEST(!mg::cpu::capabilities().bf16_math);
  BOOST_TEST(!mg::cpu::has_fast_math(DType::bfloat16));
  BOOST_TEST(mg::cpu::capabilities().kernels != "avx512");
}

// matmul and linear in 16 bits computed in float32: plain, transposed and
// sliced (not dense) operands, with a bias, against float32 on the rounded
// inputs.
BOOST_AUTO_TEST_CASE(float32_route_of_16_bit_products_matches_float32) {
  mg::manual_seed(11);
  mg::simd::LevelScope avx2(mg::simd::Level::avx2);
  mg::backend::onednn::ModeScope always(mg::backend::onednn::Mode::always);
  for (DType dt : {DType::bfloat16, DType::float16}) {
    BOOST_TEST_CONTEXT(mg::to_string(dt)) {
      const Tensor a = mg::normal({37, 53}).to(dt), b = mg::normal({53, 29}).to(dt);
      const Tensor w = mg::normal({29, 53}).to(dt), bias = mg::normal({29}).to(dt);
      const Tensor wide = mg::normal({53, 40}).to(dt);
      const auto f32 = [](const Tensor& t) { return t.to(DType::float32); };
      const double tol = dt == DType::bfloat16 ? 1e-2 : 2e-3;
      BOOST_TEST(max_relative_error(F::matmul(a, b), F::matmul(f32(a), f32(b))) < tol);
      BOOST_TEST(F::matmul(a, b).dtype() == dt);
      BOOST_TEST(max_relative_error(F::linear(a, w, bias), F::linear(f32(a), f32(w), f32(bias))) < tol);
      const Tensor bt = F::transpose(w, 0, 1);  // [53, 29], a transposed view
      BOOST_TEST(max_relative_error(F::matmul(a, bt), F::matmul(f32(a), f32(bt))) < tol);
      const Tensor sliced = wide.narrow(1, 3, 29);  // not dense: rows of 40 with 29 read
      BOOST_TEST(max_relative_error(F::matmul(a, sliced), F::matmul(f32(a), f32(sliced))) < tol);
    }
  }
}

// Convolutions, forward and both gradients, in 16 bits computed in float32:
// channel counts oneDNN blocks by 8 or 16 (converted while reordered, in one
// pass) and counts it cannot block evenly (converted, then reordered).
BOOST_AUTO_TEST_CASE(float32_route_of_16_bit_convolutions_matches_float32) {
  mg::manual_seed(12);
  mg::simd::LevelScope avx2(mg::simd::Level::avx2);
  mg::backend::onednn::ModeScope always(mg::backend::onednn::Mode::always);
  struct Channels {
    int64_t in, out;
  };
  for (DType dt : {DType::bfloat16, DType::float16}) {
    for (Channels c : {Channels{3, 4}, Channels{16, 8}, Channels{32, 16}, Channels{8, 24}}) {
      BOOST_TEST_CONTEXT(mg::to_string(dt) << ", " << c.in << " -> " << c.out << " channels") {
        const auto run = [&](DType as) {
          mg::manual_seed(100 + c.in);
          Tensor x = mg::normal({2, c.in, 9, 7}).to(dt).to(as), w = mg::normal({c.out, c.in, 3, 3}, 0, 0.3).to(dt).to(as);
          Tensor b = mg::normal({c.out}).to(dt).to(as), gy = mg::normal({2, c.out, 9, 7}).to(dt).to(as);
          mg::autodiff::GradManager gm;
          gm.attach({x, w, b});
          Tensor y;
          {
            auto recording = gm.record();
            y = F::conv2d(x, w, b, {.padding = 1});
            gm.backward(y, gy);
          }
          return std::vector<Tensor>{y, x.grad(), w.grad(), b.grad()};
        };
        const auto low = run(dt), ref = run(DType::float32);
        const double tol = dt == DType::bfloat16 ? 2e-2 : 4e-3;
        const char* names[] = {"y", "x.grad", "w.grad", "b.grad"};
        for (size_t k = 0; k < low.size(); ++k) {
          BOOST_TEST(low[k].dtype() == dt, names[k]);
          BOOST_TEST(max_relative_error(low[k], ref[k]) < tol, names[k] << ": " << max_relative_error(low[k], ref[k]));
        }
      }
    }
  }
}

// Under RoundedProducts (on such a CPU the products otherwise read float32
// weights as they are: the next cases) autocast's cached cast weight gives
// the results of the same products on a 16-bit weight cast by hand, bit
// for bit, in forward and backward, and a weight changed in place is cast
// anew.
BOOST_AUTO_TEST_CASE(rounded_products_give_the_16_bit_results) {
  mg::amp::detail::RoundedProducts rounded;
  mg::manual_seed(13);
  mg::simd::LevelScope avx2(mg::simd::Level::avx2);
  mg::backend::onednn::ModeScope always(mg::backend::onednn::Mode::always);
  Tensor w = mg::normal({24, 40}), x = mg::normal({16, 40});
  mg::autodiff::GradManager gm;
  gm.attach({w});

  const auto reference = [&](const Tensor& weight) {  // the 16-bit product, no autocast, no cache
    const Tensor wb = weight.detach().to(DType::bfloat16);
    mg::autodiff::GradManager ref_gm;
    ref_gm.attach({wb});
    Tensor y;
    {
      auto recording = ref_gm.record();
      y = F::linear(x.to(DType::bfloat16), wb);
      ref_gm.backward(F::sum(y.to(DType::float32)));
    }
    return std::make_pair(y, wb.grad().to(DType::float32));
  };

  for (int round = 0; round < 2; ++round) {
    BOOST_TEST_CONTEXT("round " << round) {
      Tensor y;
      {
        mg::amp::autocast scope(true, DType::bfloat16);
        auto recording = gm.record();
        y = F::linear(x, w);
        const Tensor again = F::linear(x, w);  // the cached cast, read a second time
        BOOST_TEST(same_values(again, y));
        gm.backward(F::sum(y.to(DType::float32)));
      }
      const auto [y_ref, g_ref] = reference(w);
      BOOST_TEST(y.dtype() == DType::bfloat16);
      BOOST_TEST(same_values(y, y_ref));
      BOOST_TEST(same_values(w.grad(), g_ref));
      // Change the weight in place: the next region must not use the old copy.
      w.set_grad(Tensor());
      float* p = w.data<float>();
      for (int64_t i = 0; i < w.numel(); ++i) p[i] = p[i] * 0.5f + 0.01f;
      w.bump_version();
    }
  }
}

// Where the CPU computes 16-bit products in float32, autocast's linear and
// matmul read float32 operands as they are, without a cast: the result is
// the float32 product rounded once to the low dtype, the weight's gradient
// is the float32 product of the rounded upstream gradient and the input,
// and the cast cache counts the operands kept instead of casting them.
BOOST_AUTO_TEST_CASE(products_read_float32_operands_as_they_are_without_16_bit_math) {
  mg::manual_seed(17);
  mg::simd::LevelScope avx2(mg::simd::Level::avx2);  // no bfloat16 math; float16 has none on any CPU
  for (const DType low : {DType::bfloat16, DType::float16}) {
    BOOST_TEST_CONTEXT(mg::to_string(low)) {
      Tensor x = mg::normal({16, 40}), w = mg::normal({24, 40}), b = mg::normal({24}), r = mg::normal({16, 24});
      mg::autodiff::GradManager gm;
      gm.attach({x, w, b});
      const auto before = mg::amp::detail::weight_cache_stats();
      Tensor y, z;
      {
        mg::amp::autocast scope(true, low);
        auto recording = gm.record();
        y = F::linear(x, w, b);
        z = F::matmul(x, F::transpose(w, 0, 1));
        gm.backward(F::sum(F::mul(y.to(DType::float32), r)));
      }
      const auto after = mg::amp::detail::weight_cache_stats();
      BOOST_TEST(after.kept_float32 - before.kept_float32 == 5u);  // x, w, b; x, w
      BOOST_TEST(after.misses == before.misses);
      BOOST_TEST(y.dtype() == low);
      BOOST_TEST(z.dtype() == low);
      BOOST_TEST(same_values(y, F::linear(x, w, b).to(low)));
      BOOST_TEST(same_values(z, F::matmul(x, F::transpose(w, 0, 1)).to(low)));
      const Tensor g = r.to(low).to(DType::float32);  // what reaches linear: the gradient rounded to its output
      BOOST_TEST(w.grad().dtype() == DType::float32);
      BOOST_TEST(x.grad().dtype() == DType::float32);
      BOOST_TEST(b.grad().dtype() == DType::float32);
      BOOST_TEST(max_relative_error(w.grad(), F::matmul(F::transpose(g, 0, 1), x)) < 1e-6);
      BOOST_TEST(max_relative_error(x.grad(), F::matmul(g, w)) < 1e-6);
      BOOST_TEST(max_relative_error(b.grad(), F::sum(g, {0})) < 1e-6);
    }
  }
}

// The same products with 16-bit activations beside float32 weights, batched
// (a 3-d input folded into one product), and through create_graph: the
// recorded input gradient is differentiable in the float32 weight.
BOOST_AUTO_TEST_CASE(mixed_products_take_16_bit_activations_and_give_second_order_gradients) {
  mg::manual_seed(19);
  mg::simd::LevelScope avx2(mg::simd::Level::avx2);
  Tensor x16 = mg::normal({3, 5, 8}).to(DType::bfloat16), w = mg::normal({6, 8});
  const Tensor c = mg::normal({3, 5, 8});
  mg::autodiff::GradManager gm;
  gm.attach({x16, w});
  auto recording = gm.record();
  {
    mg::amp::autocast scope(true, DType::bfloat16);
    const Tensor y = F::linear(x16, w);
    BOOST_TEST(y.dtype() == DType::bfloat16);
    BOOST_TEST(same_values(y, F::linear(x16.to(DType::float32), w).to(DType::bfloat16)));
    const Tensor zb = F::matmul(x16, F::transpose(w, 0, 1));  // batched [3, 5, 8] x [8, 6]
    BOOST_TEST(same_values(zb, y));
    gm.backward(F::sum(y.to(DType::float32)), {}, {.create_graph = true});
  }
  // d/dw sum(x w^T) = the sum of x's rows, for every output.
  const Tensor gw = w.grad();
  BOOST_TEST(gw.dtype() == DType::float32);
  const Tensor x_rows = F::sum(F::reshape(x16.to(DType::float32), {15, 8}), {0});
  for (int64_t o = 0; o < 6; ++o)
    BOOST_TEST(max_relative_error(F::reshape(F::narrow(gw, 0, o, 1), {8}), x_rows) < 1e-6);
  // gx = ones · w, recorded: d/dw sum(gx * c) = the sum of c's rows (c
  // rounded to gx's bfloat16 on its way back), for every output.
  const Tensor gx = x16.grad();
  BOOST_TEST(gx.dtype() == DType::bfloat16);
  w.set_grad(Tensor());
  gm.backward(F::sum(F::mul(gx.to(DType::float32), c)));
  const Tensor c_rows = F::sum(F::reshape(c.to(DType::bfloat16).to(DType::float32), {15, 8}), {0});
  for (int64_t o = 0; o < 6; ++o)
    BOOST_TEST(max_relative_error(F::reshape(F::narrow(w.grad(), 0, o, 1), {8}), c_rows) < 1e-5);
}

// Runs op(x, w, b) on float32 operands under autocast to `low` (on a CPU
// without 16-bit math: the caller's LevelScope) with upstream gradient r,
// and checks that the three operands were read as they are (kept, no cast),
// that the result is `low` and equals `want`, and that the weight and bias
// gradients are the float32 ones of r rounded to `low`.
template <class Op>
void check_reads_float32_weights(DType low, const Tensor& x, const Tensor& w_in, const Tensor& b_in, const Tensor& r,
                                 Op op, const Tensor& want) {
  Tensor w = w_in.detach().clone(), b = b_in.detach().clone();
  mg::autodiff::GradManager gm;
  gm.attach({w, b});
  const auto before = mg::amp::detail::weight_cache_stats();
  Tensor y;
  {
    mg::amp::autocast scope(true, low);
    auto recording = gm.record();
    y = op(x, w, b);
    gm.backward(F::sum(F::mul(y.to(DType::float32), r)));
  }
  const auto after = mg::amp::detail::weight_cache_stats();
  BOOST_TEST(after.kept_float32 - before.kept_float32 == 3u);  // x, w, b
  BOOST_TEST(after.misses == before.misses);
  BOOST_TEST(y.dtype() == low);
  BOOST_TEST(same_values(y, want));
  Tensor w32 = w_in.detach().clone(), b32 = b_in.detach().clone();
  mg::autodiff::GradManager ref;
  ref.attach({w32, b32});
  {
    auto recording = ref.record();
    ref.backward(F::sum(F::mul(op(x, w32, b32), r.to(low).to(DType::float32))));
  }
  BOOST_TEST(w.grad().dtype() == DType::float32);
  BOOST_TEST(b.grad().dtype() == DType::float32);
  BOOST_TEST(max_relative_error(w.grad(), w32.grad()) < 1e-5);
  BOOST_TEST(max_relative_error(b.grad(), b32.grad()) < 1e-5);
}

// Convolutions the same way as linear and matmul, through oneDNN and
// through the built-in kernels: the result is the float32 convolution
// rounded once.
BOOST_AUTO_TEST_CASE(convolutions_read_float32_weights_as_they_are_without_16_bit_math) {
  mg::manual_seed(29);
  mg::simd::LevelScope avx2(mg::simd::Level::avx2);
  namespace onednn = mg::backend::onednn;
  const Tensor x = mg::normal({2, 3, 8, 8}), r = mg::normal({2, 8, 8, 8});
  const Tensor w = mg::normal({8, 3, 3, 3}), b = mg::normal({8});
  const auto conv = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    return F::conv2d(x, w, b, {.padding = 1});
  };
  for (const onednn::Mode mode : {onednn::Mode::always, onednn::Mode::never})
    for (const DType low : {DType::bfloat16, DType::float16}) {
      BOOST_TEST_CONTEXT(mg::to_string(low) << (mode == onednn::Mode::always ? ", oneDNN" : ", built-in")) {
        onednn::ModeScope path(mode);
        check_reads_float32_weights(low, x, w, b, r, conv, conv(x, w, b).to(low));
      }
    }
}

// conv_transpose2d likewise; its float32 bias is added in the result's
// dtype, as a 16-bit one is.
BOOST_AUTO_TEST_CASE(transposed_convolutions_read_float32_weights_as_they_are_without_16_bit_math) {
  mg::manual_seed(37);
  mg::simd::LevelScope avx2(mg::simd::Level::avx2);
  const Tensor x = mg::normal({2, 4, 5, 5}), r = mg::normal({2, 6, 11, 11});
  const Tensor w = mg::normal({4, 6, 3, 3}), b = mg::normal({6});
  const auto conv_t = [](const Tensor& x, const Tensor& w, const Tensor& b) {
    return F::conv_transpose2d(x, w, b, {.stride = 2});
  };
  for (const DType low : {DType::bfloat16, DType::float16}) {
    BOOST_TEST_CONTEXT(mg::to_string(low)) {
      const Tensor want = F::add(conv_t(x, w, Tensor()).to(low), F::reshape(b.to(low), {1, 6, 1, 1}));
      check_reads_float32_weights(low, x, w, b, r, conv_t, want);
    }
  }
}

// A 16-bit input beside a float32 weight through create_graph: the recorded
// input gradient is differentiable in the weight, as in float32.
BOOST_AUTO_TEST_CASE(mixed_convolutions_give_second_order_gradients) {
  mg::manual_seed(31);
  mg::simd::LevelScope avx2(mg::simd::Level::avx2);
  Tensor x16 = mg::normal({2, 3, 6, 6}).to(DType::bfloat16), w = mg::normal({4, 3, 3, 3});
  const Tensor c = mg::normal({2, 3, 6, 6});
  const F::Conv2dOptions o{.padding = 1};
  mg::autodiff::GradManager gm;
  gm.attach({x16, w});
  auto recording = gm.record();
  {
    mg::amp::autocast scope(true, DType::bfloat16);
    gm.backward(F::sum(F::conv2d(x16, w, Tensor(), o).to(DType::float32)), {}, {.create_graph = true});
  }
  const Tensor gx = x16.grad();
  BOOST_TEST(gx.dtype() == DType::bfloat16);
  w.set_grad(Tensor());
  gm.backward(F::sum(F::mul(gx.to(DType::float32), c)));
  // The same in float32: gx = conv's data gradient of ones, d/dw <gx, c>.
  Tensor w32 = w.detach().clone();
  mg::autodiff::GradManager ref;
  ref.attach({w32});
  Tensor x32 = x16.detach().to(DType::float32);
  ref.attach({x32});
  {
    auto rec = ref.record();
    ref.backward(F::sum(F::conv2d(x32, w32, Tensor(), o)), {}, {.create_graph = true});
    const Tensor gx32 = x32.grad();
    w32.set_grad(Tensor());
    ref.backward(F::sum(F::mul(gx32, c.to(DType::bfloat16).to(DType::float32))));
  }
  BOOST_TEST(w.grad().dtype() == DType::float32);
  BOOST_TEST(max_relative_error(w.grad(), w32.grad()) < 1e-5);
}

// Where the CPU has bfloat16 math, autocast rounds the weight to bfloat16
// (a cache miss, no operand kept): the product is the bfloat16 one.
BOOST_AUTO_TEST_CASE(products_cast_float32_operands_where_16_bit_math_exists) {
  if (!mg::simd::bf16_math()) {
    BOOST_TEST_MESSAGE("this CPU (or its cap) has no bfloat16 math; nothing to compare");
    return;
  }
  mg::manual_seed(23);
  Tensor x = mg::normal({8, 16}), w = mg::normal({4, 16});
  mg::autodiff::GradManager gm;
  gm.attach({w});
  const auto before = mg::amp::detail::weight_cache_stats();
  Tensor y;
  {
    mg::amp::autocast scope(true, DType::bfloat16);
    auto recording = gm.record();
    y = F::linear(x, w);
  }
  const auto after = mg::amp::detail::weight_cache_stats();
  BOOST_TEST(after.misses - before.misses == 1u);
  BOOST_TEST(after.kept_float32 == before.kept_float32);
  BOOST_TEST(same_values(y, F::linear(x.to(DType::bfloat16), w.to(DType::bfloat16))));
}

BOOST_AUTO_TEST_SUITE_END()
