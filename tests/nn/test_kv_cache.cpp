// nn::KVCache with MultiheadAttention and TransformerEncoderLayer: decoding
// with the cache, token by token or a prompt chunk at a time, gives the full
// causal forward over the whole sequence (float32 tightly, bf16 autocast
// within bf16's rounding); the cache is preallocated and reusable; every
// misuse throws a typed error naming the module and leaves the cache as it was.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "../common/test_util.hpp"

namespace {

namespace mg = mixgrad;
namespace nn = mixgrad::nn;
namespace F = mixgrad::F;
using test_util::check_error;
using test_util::randn;
using test_util::values;

/// max |got - want| / (1 + |want|); also fails the test on a shape mismatch.
double max_rel_diff(const mg::Tensor& got, const mg::Tensor& want) {
  BOOST_TEST_REQUIRE(mg::to_string(got.shape()) == mg::to_string(want.shape()));
  const auto g = values(got), w = values(want);
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::abs(g[i] - w[i]) / (1 + std::abs(w[i])));
  return worst;
}

/// Feeds x [N, T, E] (batch-first) through `step` in chunks of the given
/// lengths and concatenates the outputs along the positions.
template <class Step>
mg::Tensor decode(const mg::Tensor& x, const std::vector<int64_t>& chunks, Step&& step) {
  std::vector<mg::Tensor> outs;
  int64_t at = 0;
  for (int64_t len : chunks) {
    outs.push_back(step(F::narrow(x, 1, at, len)));
    at += len;
  }
  BOOST_TEST_REQUIRE(at == x.size(1));
  return F::concat(outs, 1);
}

std::vector<int64_t> ones(int64_t n) { return std::vector<int64_t>(static_cast<size_t>(n), 1); }

/// A decoder-only stack of pre- or post-norm layers, evaluated in eval mode.
struct Stack {
  std::vector<std::unique_ptr<nn::TransformerEncoderLayer>> layers;
  Stack(int n, bool norm_first) {
    mg::manual_seed(7);
    for (int i = 0; i < n; ++i) {
      layers.push_back(std::make_unique<nn::TransformerEncoderLayer>(
          16, 4,
          nn::TransformerEncoderLayerOptions{.dim_feedforward = 32, .dropout = 0.1,
                                             .activation = nn::Activation::gelu_tanh, .batch_first = true,
                                             .norm_first = norm_first}));
      layers.back()->eval();
    }
  }
  mg::Tensor full(mg::Tensor x) {
    for (auto& l : layers) x = l->forward(x, {.is_causal = true});
    return x;
  }
  std::vector<nn::KVCache> caches(int64_t batch, int64_t capacity, mg::DType dtype) {
    std::vector<nn::KVCache> c;
    for (auto& l : layers) c.push_back(l->make_kv_cache(batch, capacity, dtype));
    return c;
  }
  mg::Tensor cached(mg::Tensor x, std::vector<nn::KVCache>& c, const mg::Tensor& padding = mg::Tensor()) {
    for (size_t i = 0; i < layers.size(); ++i) x = layers[i]->forward(x, c[i], padding);
    return x;
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(kv_cache)

BOOST_AUTO_TEST_CASE(mha_token_by_token_equals_the_full_causal_forward) {
  mg::autodiff::inference_mode guard;
  nn::MultiheadAttention bf(16, 4, {.batch_first = true});
  nn::MultiheadAttention sf(16, 4);  // [L, N, E]
  sf.load_state_dict(bf.state_dict());
  const auto x = randn({2, 7, 16}, 1);
  const auto want = bf.forward(x, x, x, {.is_causal = true});

  auto cache = bf.make_kv_cache(2, 7, mg::DType::float32);
  const auto got = decode(x, ones(7), [&](const mg::Tensor& t) { return bf.forward(t, cache); });
  BOOST_TEST(max_rel_diff(got, want) < 1e-5);
  BOOST_TEST(cache.length() == 7);
  BOOST_TEST(cache.remaining() == 0);

  // The sequence-first layout, and the causality itself: the first position
  // attends to itself only, so it differs from a non-causal forward.
  auto cache2 = sf.make_kv_cache(2, 8, mg::DType::float32);
  const auto got2 = decode(x, ones(7), [&](const mg::Tensor& t) {
    return F::transpose(sf.forward(F::transpose(t, 0, 1), cache2), 0, 1);
  });
  BOOST_TEST(max_rel_diff(got2, want) < 1e-5);
  BOOST_TEST(max_rel_diff(F::narrow(got, 1, 0, 6), F::narrow(bf(x), 1, 0, 6)) > 1e-3);
}

BOOST_AUTO_TEST_CASE(a_prompt_chunk_then_chunks_and_tokens_equal_the_full_forward) {
  mg::autodiff::inference_mode guard;
  nn::MultiheadAttention mha(16, 4, {.batch_first = true});
  const auto x = randn({2, 10, 16}, 2);
  const auto want = mha.forward(x, x, x, {.is_causal = true});
  // A prompt of 4 (empty cache: is_causal), a chunk of 3 after 4 cached
  // positions (needs the offset mask), then single tokens; unbatched too.
  auto cache = mha.make_kv_cache(2, 16, mg::DType::float32);
  const auto got = decode(x, {4, 3, 1, 2}, [&](const mg::Tensor& t) { return mha.forward(t, cache); });
  BOOST_TEST(max_rel_diff(got, want) < 1e-5);
  BOOST_TEST(cache.length() == 10);

  auto one = mha.make_kv_cache(1, 10, mg::DType::float32);
  const auto x0 = F::reshape(F::narrow(x, 0, 0, 1), {10, 16});
  const auto got0 = decode(F::unsqueeze(x0, 0), {5, 5}, [&](const mg::Tensor& t) {
    return F::unsqueeze(mha.forward(F::squeeze(t, 0), one), 0);
  });
  BOOST_TEST(max_rel_diff(got0, F::narrow(want, 0, 0, 1)) < 1e-5);
}

BOOST_AUTO_TEST_CASE(an_encoder_stack_decodes_as_its_full_causal_forward) {
  mg::autodiff::inference_mode guard;
  for (bool norm_first : {true, false}) {
    Stack s(3, norm_first);
    const auto x = randn({2, 9, 16}, 3);
    const auto want = s.full(x);
    auto c = s.caches(2, 12, mg::DType::float32);
    const auto got = decode(x, {3, 1, 1, 2, 1, 1}, [&](const mg::Tensor& t) { return s.cached(t, c); });
    BOOST_TEST(max_rel_diff(got, want) < 1e-5, "norm_first " << norm_first);
    for (const auto& ci : c) BOOST_TEST(ci.length() == 9);
  }
}

// Two prompts of 6 and 3 tokens, the shorter left-padded by 3, decoded as
// one batch (the prompts, then 4 tokens one at a time) with a key padding
// mask: each sequence's outputs equal its own full causal forward, unpadded.
BOOST_AUTO_TEST_CASE(left_padded_prompts_decode_as_one_batch_like_each_alone) {
  mg::autodiff::inference_mode guard;
  for (bool norm_first : {true, false}) {
    Stack s(2, norm_first);
    const int64_t pad = 3, prompt = 6, steps = 4, T = prompt + steps;
    const auto a = randn({1, T, 16}, 4), b = randn({1, T - pad, 16}, 5);
    // b's sequence in the batch: `pad` filler positions, then its tokens.
    const auto batch = F::concat({a, F::concat({randn({1, pad, 16}, 6), b}, 1)}, 0);
    const auto padded = F::lt(mg::arange(T), double(pad));  // [T]: true at b's filler positions
    const auto no_pad = F::lt(mg::arange(T), 0.0);
    auto mask = [&](int64_t upto) {  // [2, upto]: a has no padding, b its first `pad` positions
      return F::concat({F::unsqueeze(F::narrow(no_pad, 0, 0, upto), 0), F::unsqueeze(F::narrow(padded, 0, 0, upto), 0)}, 0);
    };
    auto c = s.caches(2, T, mg::DType::float32);
    int64_t at = 0;
    const auto got = decode(batch, {prompt, 1, 1, 1, 1}, [&](const mg::Tensor& t) {
      at += t.size(1);
      return s.cached(t, c, mask(at));
    });

    // Each sequence alone, unpadded, through the full causal forward (no cache).
    const auto want_a = s.full(a), want_b = s.full(b);
    BOOST_TEST(max_rel_diff(F::narrow(got, 0, 0, 1), want_a) < 1e-5, "norm_first " << norm_first);
    BOOST_TEST(max_rel_diff(F::narrow(F::narrow(got, 0, 1, 1), 1, pad, T - pad), want_b) < 1e-5,
               "norm_first " << norm_first);
    // Without the mask, b's tokens would attend to the filler: the test can tell.
    auto c2 = s.caches(2, T, mg::DType::float32);
    const auto unmasked = s.cached(F::narrow(batch, 1, 0, prompt), c2);
    BOOST_TEST(max_rel_diff(F::narrow(F::narrow(unmasked, 0, 1, 1), 1, pad, prompt - pad),
                            F::narrow(want_b, 1, 0, prompt - pad)) > 1e-3);
  }
}

BOOST_AUTO_TEST_CASE(a_key_padding_mask_of_the_wrong_shape_or_dtype_throws_before_anything_is_written) {
  mg::autodiff::inference_mode guard;
  nn::MultiheadAttention mha(16, 4, {.batch_first = true});
  auto cache = mha.make_kv_cache(2, 8, mg::DType::float32);
  mha.forward(randn({2, 3, 16}, 7), cache);
  const auto x = randn({2, 1, 16}, 8);
  check_error<mg::ShapeError>([&] { mha.forward(x, cache, F::lt(mg::zeros({2, 3}), 1.0)); },
                              {"key_padding_mask", "[2, 4]", "bool[2, 3]"});
  check_error<mg::DTypeError>([&] { mha.forward(x, cache, mg::zeros({2, 4})); }, {"key_padding_mask", "bool"});
  BOOST_TEST(cache.length() == 3);
}

BOOST_AUTO_TEST_CASE(under_bf16_autocast_the_cache_is_bf16_and_matches_within_bf16_rounding) {
  mg::autodiff::inference_mode guard;
  Stack s(2, true);
  const auto x = randn({1, 12, 16}, 4);
  mg::amp::autocast ac(true, mg::DType::bfloat16);
  const auto want = s.full(x);
  auto c = s.caches(1, 12, mg::DType::bfloat16);
  const auto got = decode(x, {5, 1, 1, 1, 1, 1, 1, 1}, [&](const mg::Tensor& t) { return s.cached(t, c); });
  BOOST_TEST(got.dtype() == want.dtype());
  BOOST_TEST(c[0].cached().keys.dtype() == mg::DType::bfloat16);
  // Two layers of bf16 products and residuals: a few bf16 ulps (2^-8 each).
  const double d = max_rel_diff(got, want);
  BOOST_TEST(d < 3e-2, "max relative difference " << d);
  BOOST_TEST_MESSAGE("bf16 cached vs full: " << d);
  // The same stack in float32 is within the same bound (the cache is not
  // wrong by more than autocast's own rounding).
  mg::amp::autocast off(false);
  BOOST_TEST(max_rel_diff(F::astype(got, mg::DType::float32), s.full(x)) < 6e-2);
}

BOOST_AUTO_TEST_CASE(the_cache_is_preallocated_and_reset_reuses_it) {
  mg::autodiff::inference_mode guard;
  nn::MultiheadAttention mha(16, 4, {.batch_first = true});
  auto cache = mha.make_kv_cache(1, 8, mg::DType::float32);
  BOOST_TEST(cache.describe() == "KVCache(batch=1, heads=4, head_dim=4, length=0/8, float32, cpu)");
  void* const keys = cache.cached().keys.raw_data();
  void* const vals = cache.cached().values.raw_data();
  const auto a = randn({1, 8, 16}, 5);
  decode(a, {3, 1, 1, 1, 1, 1}, [&](const mg::Tensor& t) { return mha.forward(t, cache); });
  BOOST_TEST(cache.cached().keys.raw_data() == keys);  // written in place, never reallocated
  BOOST_TEST(cache.cached().values.raw_data() == vals);

  // A new, shorter sequence after reset(): the old positions must not leak in.
  cache.reset();
  BOOST_TEST(cache.length() == 0);
  const auto b = randn({1, 5, 16}, 6);
  const auto got = decode(b, {2, 1, 1, 1}, [&](const mg::Tensor& t) { return mha.forward(t, cache); });
  BOOST_TEST(max_rel_diff(got, mha.forward(b, b, b, {.is_causal = true})) < 1e-5);
  BOOST_TEST(cache.cached().keys.raw_data() == keys);

  // crop() rolls back: the last two positions decoded again give the same.
  cache.crop(3);
  const auto again = decode(F::narrow(b, 1, 3, 2), {1, 1}, [&](const mg::Tensor& t) { return mha.forward(t, cache); });
  BOOST_TEST(max_rel_diff(again, F::narrow(got, 1, 3, 2)) < 1e-6);
  check_error<mg::ValueError>([&] { cache.crop(6); }, {"KVCache::crop", "[0, 5]", "got 6"});
  BOOST_TEST(cache.length() == 5);
}

BOOST_AUTO_TEST_CASE(overflow_throws_and_leaves_the_cache_as_it_was) {
  mg::autodiff::inference_mode guard;
  Stack s(1, true);
  auto& layer = *s.layers[0];
  auto c = s.caches(1, 6, mg::DType::float32);
  const auto x = randn({1, 8, 16}, 7);
  layer.forward(F::narrow(x, 1, 0, 4), c[0]);
  const auto keys_before = values(c[0].cached().keys);
  const auto version = c[0].cached().keys.version();
  check_error<mg::ShapeError>([&] { layer.forward(F::narrow(x, 1, 4, 3), c[0]); },
                              {"MultiheadAttention(embed_dim=16, num_heads=4", "3 new positions do not fit",
                               "length=4/6", "(2 left)"});
  BOOST_TEST(c[0].length() == 4);
  BOOST_TEST(values(c[0].cached().keys) == keys_before, boost::test_tools::per_element());
  BOOST_TEST(c[0].cached().keys.version() == version);
  // It goes on from where it was: the two positions that fit.
  const auto got = layer.forward(F::narrow(x, 1, 4, 2), c[0]);
  BOOST_TEST(max_rel_diff(got, F::narrow(s.full(F::narrow(x, 1, 0, 6)), 1, 4, 2)) < 1e-5);
  BOOST_TEST(c[0].remaining() == 0);
}

BOOST_AUTO_TEST_CASE(mismatches_throw_naming_the_module_shapes_and_dtypes) {
  mg::autodiff::inference_mode guard;
  nn::MultiheadAttention mha(16, 4, {.batch_first = true});
  const auto x = randn({2, 3, 16}, 8);
  auto one = mha.make_kv_cache(1, 8, mg::DType::float32);
  check_error<mg::ShapeError>([&] { mha.forward(x, one); },
                              {"MultiheadAttention(embed_dim=16", "keys of [2, 4, 3, 4] do not fit",
                               "KVCache(batch=1, heads=4, head_dim=4", "[batch=1, heads=4, L, head_dim=4]"});
  nn::KVCache two_heads(2, 8, {.batch = 2, .capacity = 8});
  check_error<mg::ShapeError>([&] { mha.forward(x, two_heads); }, {"keys of [2, 4, 3, 4]", "heads=2, head_dim=8"});
  check_error<mg::ShapeError>([&] { mha.forward(randn({2, 3, 8}, 9), one); }, {"the cached forward", "float32[2, 3, 8]"});
  auto bf16 = mha.make_kv_cache(2, 8, mg::DType::bfloat16);
  check_error<mg::DTypeError>([&] { mha.forward(x, bf16); },
                              {"MultiheadAttention(embed_dim=16", "keys float32[2, 4, 3, 4]", "bfloat16",
                               "autocast's low-precision dtype"});
  auto f32 = mha.make_kv_cache(2, 8, mg::DType::float32);
  {
    mg::amp::autocast ac(true, mg::DType::bfloat16);
    check_error<mg::DTypeError>([&] { mha.forward(x, f32); }, {"keys bfloat16[2, 4, 3, 4]", "float32, cpu)"});
  }
  check_error<mg::DeviceError>([&] { f32.check_append("caller", {2, 4, 1, 4}, mg::Device::cuda(0)); },
                               {"caller: the input is on cuda:0", "KVCache(batch=2", "on cpu"});
  for (const nn::KVCache* c : {&one, &two_heads, &bf16, &f32}) BOOST_TEST(c->length() == 0);
  // Then a good call works on the same caches.
  BOOST_TEST(max_rel_diff(mha.forward(x, f32), mha.forward(x, x, x, {.is_causal = true})) < 1e-5);

  check_error<mg::ValueError>([] { nn::KVCache(4, 4, {.capacity = 0}); }, {"KVCache", "capacity 0"});
  check_error<mg::DTypeError>([] { nn::KVCache(4, 4, {.capacity = 4, .dtype = mg::DType::int64}); },
                              {"KVCache", "int64"});
}

BOOST_AUTO_TEST_CASE(the_cache_refuses_a_recording_grad_manager) {
  nn::MultiheadAttention mha(16, 4, {.batch_first = true});
  auto cache = mha.make_kv_cache(1, 4, mg::DType::float32);
  mg::autodiff::GradManager gm;
  gm.attach(mha.parameters());
  const auto x = randn({1, 2, 16}, 10);
  {
    auto rec = gm.record();
    check_error<mg::StateError>([&] { mha.forward(x, cache); },
                                {"MultiheadAttention(embed_dim=16", "a GradManager is recording", "no_grad"});
    BOOST_TEST(cache.length() == 0);
    // Inside no_grad the same recording scope may decode.
    mg::autodiff::no_grad ng;
    mha.forward(x, cache);
  }
  BOOST_TEST(cache.length() == 2);
  // Grad mode on but nothing recording: nothing can be lost, it works.
  BOOST_TEST(mg::autodiff::is_grad_enabled());
  mha.forward(F::narrow(x, 1, 0, 1), cache);
  BOOST_TEST(cache.length() == 3);
}

// The cached forward hands scaled_dot_product_attention views of the first S
// of `capacity` positions; the fused CPU kernel reads them in place (heads
// one stride apart). Values and gradients equal those of dense copies, with
// several batch dims, grouped-query heads, a causal chunk and a mask.
BOOST_AUTO_TEST_CASE(attention_reads_a_caches_views_as_dense_keys) {
  const auto q = randn({2, 3, 4, 5, 8}, 11);
  const auto kbuf = randn({2, 3, 2, 9, 8}, 12), vbuf = randn({2, 3, 2, 9, 6}, 13);
  const auto keep = F::gt(randn({5, 7}, 14), -0.5);
  const std::vector<F::AttentionOptions> cases = {
      {.enable_gqa = true}, {.is_causal = true, .enable_gqa = true}, {.attn_mask = keep, .enable_gqa = true}};
  for (const auto& o : cases) {
    mg::autodiff::GradManager gm;
    gm.attach({q, kbuf, vbuf});
    std::vector<std::vector<double>> grads[2];
    mg::Tensor out[2];
    for (int dense = 0; dense < 2; ++dense) {
      {
        auto rec = gm.record();
        mg::Tensor k = F::narrow(kbuf, 3, 0, 7), v = F::narrow(vbuf, 3, 0, 7);  // strided: 7 of 9 positions
        if (dense) k = k.contiguous(), v = v.contiguous();
        BOOST_TEST(k.is_contiguous() == static_cast<bool>(dense));
        out[dense] = F::scaled_dot_product_attention(q, k, v, o);
        gm.backward(F::sum(F::mul(out[dense], out[dense])));
      }
      for (const auto& t : {q, kbuf, vbuf}) grads[dense].push_back(values(t.grad()));
      for (const auto& t : {q, kbuf, vbuf}) t.set_grad(mg::Tensor());
    }
    BOOST_TEST(max_rel_diff(out[0], out[1]) < 1e-6);
    for (int i = 0; i < 3; ++i) BOOST_TEST(grads[0][i] == grads[1][i], boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_SUITE_END()
