// nn::TransformerDecoderLayer: PyTorch's state-dict names, the output against
// the layer's definition composed from its own sublayers (MultiheadAttention,
// F::linear, F::layer_norm on the same weights) in both norm orders and both
// layouts, the masks, gradients against finite differences in float64, bf16
// autocast against float32, and errors that change nothing.
#include <boost/test/unit_test.hpp>

#include <algorithm>
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
using test_util::values;

constexpr int64_t kModel = 8, kHeads = 2, kFeedForward = 12;

mg::Tensor randn(mg::Shape s, uint64_t seed, mg::DType dtype = mg::DType::float32) {
  mg::manual_seed(seed);
  return mg::normal(s, 0.0, 1.0, dtype);
}

nn::TransformerDecoderLayer make_layer(bool norm_first, bool batch_first = true, double dropout = 0.0) {
  mg::manual_seed(7);
  return nn::TransformerDecoderLayer(kModel, kHeads,
                                     {.dim_feedforward = kFeedForward, .dropout = dropout,
                                      .activation = nn::Activation::gelu, .batch_first = batch_first,
                                      .norm_first = norm_first});
}

mg::Tensor param(const nn::Module& m, const std::string& name) {
  for (const auto& [n, t] : m.named_parameters())
    if (n == name) return t;
  BOOST_FAIL("no parameter " + name);
  return {};
}

/// The layer's definition (PyTorch's TransformerDecoderLayer.forward without
/// dropout) written out from its sublayers, on [N, L, E] inputs.
mg::Tensor decoder_by_hand(nn::TransformerDecoderLayer& layer, bool norm_first, const mg::Tensor& tgt,
                           const mg::Tensor& memory, const nn::AttentionMasks& tgt_masks = {},
                           const nn::AttentionMasks& memory_masks = {}) {
  auto ln = [&](const mg::Tensor& t, const std::string& which) {
    return F::layer_norm(t, {kModel}, param(layer, which + ".weight"), param(layer, which + ".bias"));
  };
  auto sa = [&](const mg::Tensor& t) { return layer.self_attn().forward(t, t, t, tgt_masks); };
  auto mha = [&](const mg::Tensor& t) { return layer.multihead_attn().forward(t, memory, memory, memory_masks); };
  auto ff = [&](const mg::Tensor& t) {
    const auto h = F::gelu(F::linear(t, param(layer, "linear1.weight"), param(layer, "linear1.bias")));
    return F::linear(h, param(layer, "linear2.weight"), param(layer, "linear2.bias"));
  };
  mg::Tensor x = tgt;
  if (norm_first) {
    x = F::add(x, sa(ln(x, "norm1")));
    x = F::add(x, mha(ln(x, "norm2")));
    return F::add(x, ff(ln(x, "norm3")));
  }
  x = ln(F::add(x, sa(x)), "norm1");
  x = ln(F::add(x, mha(x)), "norm2");
  return ln(F::add(x, ff(x)), "norm3");
}

/// [N, L, E] with row `pos` of batch `b` changed by `by` times a pattern:
/// a change that only the positions allowed to see it may notice. Not a
/// constant shift, which a layer norm of the row would cancel.
mg::Tensor perturbed(const mg::Tensor& x, int64_t b, int64_t pos, float by) {
  mg::Tensor y = x.clone();
  float* d = y.data<float>();
  for (int64_t e = 0; e < x.size(2); ++e) d[(b * x.size(1) + pos) * x.size(2) + e] += by * (e % 2 ? 1.0f : -0.5f);
  return y;
}

/// The largest |a - b| over the rows [from, from + n) of dim 1.
double max_diff_rows(const mg::Tensor& a, const mg::Tensor& b, int64_t from, int64_t n) {
  const auto x = values(F::narrow(a, 1, from, n)), y = values(F::narrow(b, 1, from, n));
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

std::vector<double> snapshot(const nn::Module& m) {
  std::vector<double> out;
  for (const mg::Tensor& p : m.parameters())
    for (double v : values(p)) out.push_back(v);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(transformer_decoder_layer)

BOOST_AUTO_TEST_CASE(has_pytorchs_parameter_names_in_pytorchs_order) {
  auto layer = make_layer(false);
  std::vector<std::string> got;
  for (const auto& [name, t] : layer.named_parameters()) got.push_back(name + " " + mg::to_string(t.shape()));
  const std::vector<std::string> want = {
      "self_attn.in_proj_weight [24, 8]",      "self_attn.in_proj_bias [24]",
      "self_attn.out_proj.weight [8, 8]",      "self_attn.out_proj.bias [8]",
      "multihead_attn.in_proj_weight [24, 8]", "multihead_attn.in_proj_bias [24]",
      "multihead_attn.out_proj.weight [8, 8]", "multihead_attn.out_proj.bias [8]",
      "linear1.weight [12, 8]",                "linear1.bias [12]",
      "linear2.weight [8, 12]",                "linear2.bias [8]",
      "norm1.weight [8]",                      "norm1.bias [8]",
      "norm2.weight [8]",                      "norm2.bias [8]",
      "norm3.weight [8]",                      "norm3.bias [8]"};
  BOOST_TEST(got == want, boost::test_tools::per_element());
  std::vector<std::string> keys;
  for (const auto& [name, t] : layer.state_dict()) keys.push_back(name);
  std::vector<std::string> want_keys;
  for (const std::string& w : want) want_keys.push_back(w.substr(0, w.find(' ')));
  BOOST_TEST(keys == want_keys, boost::test_tools::per_element());

  // bias=false drops every bias, the norms' included (as PyTorch's bias=False).
  nn::TransformerDecoderLayer no_bias(kModel, kHeads, {.dim_feedforward = kFeedForward, .bias = false});
  for (const auto& [name, t] : no_bias.named_parameters()) BOOST_TEST(name.find("bias") == std::string::npos, name);
  BOOST_TEST(no_bias.named_parameters().size() == 9u);
}

BOOST_AUTO_TEST_CASE(matches_its_sublayers_in_both_norm_orders_and_layouts) {
  const auto tgt = randn({2, 5, kModel}, 1), memory = randn({2, 7, kModel}, 2);
  for (bool norm_first : {false, true}) {
    BOOST_TEST_CONTEXT("norm_first " << norm_first) {
      auto layer = make_layer(norm_first);
      const auto want = decoder_by_hand(layer, norm_first, tgt, memory);
      check_close(layer(tgt, memory), want, 1e-5);
      // The same weights in PyTorch's default layout [L, N, E].
      auto seq_first = make_layer(norm_first, /*batch_first=*/false);
      seq_first.load_state_dict(layer.state_dict());
      check_close(seq_first(F::transpose(tgt, 0, 1), F::transpose(memory, 0, 1)), F::transpose(want, 0, 1), 1e-5);
      // Unbatched [T, E] and [S, E]: batch 0 alone.
      const auto t0 = F::narrow(tgt, 0, 0, 1), m0 = F::narrow(memory, 0, 0, 1);
      check_close(layer(F::squeeze(t0, 0), F::squeeze(m0, 0)), F::squeeze(F::narrow(want, 0, 0, 1), 0), 1e-5);
    }
  }
}

BOOST_AUTO_TEST_CASE(masks_reach_the_attention_they_are_meant_for) {
  for (bool norm_first : {false, true}) {
    BOOST_TEST_CONTEXT("norm_first " << norm_first) {
      auto layer = make_layer(norm_first);
      const auto tgt = randn({2, 5, kModel}, 3), memory = randn({2, 6, kModel}, 4);
      const auto mem_pad = mg::tensor<bool>({false, false, false, false, true, true,  //
                                             false, false, false, false, false, true},
                                            {2, 6});
      const nn::AttentionMasks causal{.is_causal = true}, padded{.key_padding_mask = mem_pad};
      const auto y = layer(tgt, memory, causal, padded);
      check_close(y, decoder_by_hand(layer, norm_first, tgt, memory, causal, padded), 1e-5);

      // tgt_is_causal: a change at the last target position leaves the
      // earlier positions' outputs alone; without the mask it does not.
      const auto tgt2 = perturbed(tgt, 0, 4, 3.0f);
      BOOST_TEST(max_diff_rows(layer(tgt2, memory, causal, padded), y, 0, 4) < 1e-6);
      BOOST_TEST(max_diff_rows(layer(tgt2, memory), layer(tgt, memory), 0, 4) > 1e-3);
      // An explicit tgt_mask (bool, true above the diagonal: blocked) is the same as is_causal.
      std::vector<bool> above(25);
      for (int i = 0; i < 25; ++i) above[i] = (i % 5) > (i / 5);
      check_close(layer(tgt, memory, {.attn_mask = mg::tensor<bool>(above, {5, 5})}, padded), y, 1e-5);

      // memory_key_padding_mask: padded memory positions are not read ...
      const auto memory2 = perturbed(perturbed(memory, 0, 5, 3.0f), 1, 5, -2.0f);
      check_close(layer(tgt, memory2, causal, padded), y, 1e-6);
      // ... and an unpadded one is.
      BOOST_TEST(max_diff_rows(layer(tgt, perturbed(memory, 0, 1, 3.0f), causal, padded), y, 0, 5) > 1e-3);

      // tgt_key_padding_mask: a padded target position is read by no other position.
      const auto tgt_pad = mg::tensor<bool>({false, false, true, false, false, false, false, false, false, false}, {2, 5});
      const auto base = layer(tgt, memory, {.key_padding_mask = tgt_pad});
      const auto moved = layer(perturbed(tgt, 0, 2, 3.0f), memory, {.key_padding_mask = tgt_pad});
      BOOST_TEST(max_diff_rows(moved, base, 0, 2) < 1e-6);
      BOOST_TEST(max_diff_rows(moved, base, 3, 2) < 1e-6);
      BOOST_TEST(max_diff_rows(moved, base, 2, 1) > 1e-3);  // its own row: the residual path
    }
  }
}

BOOST_AUTO_TEST_CASE(gradients_match_finite_differences_in_float64) {
  for (bool norm_first : {false, true}) {
    BOOST_TEST_CONTEXT("norm_first " << norm_first) {
      mg::manual_seed(11);
      nn::TransformerDecoderLayer layer(4, 2, {.dim_feedforward = 6, .dropout = 0.0,
                                               .activation = nn::Activation::gelu_tanh, .batch_first = true,
                                               .norm_first = norm_first});
      layer.to(mg::DType::float64);
      const auto tgt = randn({2, 3, 4}, 12, mg::DType::float64), memory = randn({2, 4, 4}, 13, mg::DType::float64);
      const auto weight = randn({2, 3, 4}, 14, mg::DType::float64);
      const auto mem_pad = mg::tensor<bool>({false, false, false, true, false, false, false, false}, {2, 4});
      auto loss = [&] {
        const auto y = layer(tgt, memory, {.is_causal = true}, {.key_padding_mask = mem_pad});
        return F::sum(F::mul(y, weight));
      };
      mg::autodiff::GradManager gm;
      gm.attach(layer.parameters());
      gm.attach({tgt, memory});
      {
        auto rec = gm.record();
        gm.backward(loss());
      }
      auto value = [&] { return loss().item<double>(); };
      for (const auto& [name, p] : layer.named_parameters())
        BOOST_TEST_CONTEXT(name) { test_util::check_finite_differences(p, p.grad(), value, 1e-6); }
      BOOST_TEST_CONTEXT("tgt") { test_util::check_finite_differences(tgt, tgt.grad(), value, 1e-6); }
      BOOST_TEST_CONTEXT("memory") { test_util::check_finite_differences(memory, memory.grad(), value, 1e-6); }
    }
  }
}

BOOST_AUTO_TEST_CASE(bfloat16_autocast_is_close_to_float32) {
  for (bool norm_first : {false, true}) {
    BOOST_TEST_CONTEXT("norm_first " << norm_first) {
      auto layer = make_layer(norm_first);
      const auto tgt = randn({2, 5, kModel}, 21), memory = randn({2, 7, kModel}, 22);
      const auto want = layer(tgt, memory, {.is_causal = true});
      const auto weight = randn({2, 5, kModel}, 23);  // not uniform: a plain sum of a layer norm's output has no gradient
      mg::autodiff::GradManager gm;
      gm.attach(layer.parameters());
      mg::Tensor got;
      {
        auto rec = gm.record();
        mg::amp::autocast scope(true, mg::DType::bfloat16);
        got = layer(tgt, memory, {.is_causal = true});
        gm.backward(F::sum(F::mul(F::astype(got, mg::DType::float32), weight)));
      }
      // Post-norm ends in a layer norm (float32 under autocast), pre-norm in
      // a residual sum of a bf16 feed-forward output: compare in float32.
      check_close(F::astype(got, mg::DType::float32), want, 5e-2);
      double diff = 0;
      const auto g = values(got), w = values(want);
      for (size_t i = 0; i < g.size(); ++i) diff = std::max(diff, std::abs(g[i] - w[i]));
      BOOST_TEST(diff > 0.0, "autocast changed nothing: the bf16 path did not run");
      for (const auto& [name, p] : layer.named_parameters()) {
        BOOST_TEST((p.grad().dtype() == mg::DType::float32), name);
        BOOST_TEST(std::isfinite(F::sum(p.grad()).item<float>()), name);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(bad_input_throws_naming_the_layer_and_changes_nothing) {
  auto layer = make_layer(false, true, /*dropout=*/0.2);
  const auto tgt = randn({2, 5, kModel}, 31), memory = randn({2, 7, kModel}, 32);
  const auto before = snapshot(layer);
  using test_util::check_error;
  check_error<mg::ShapeError>([&] { layer(tgt, randn({2, 7, 6}, 33)); },
                              {"TransformerDecoderLayer(d_model=8, nhead=2", "d_model = 8", "tgt float32[2, 5, 8]",
                               "memory float32[2, 7, 6]"});
  check_error<mg::ShapeError>([&] { layer(tgt, randn({3, 7, kModel}, 34)); },
                              {"TransformerDecoderLayer", "batch size", "memory float32[3, 7, 8]"});
  check_error<mg::ShapeError>([&] { layer(tgt, randn({7, kModel}, 35)); },
                              {"TransformerDecoderLayer", "3-D", "tgt float32[2, 5, 8]", "memory float32[7, 8]"});
  check_error<mg::StateError>([&] { static_cast<nn::Module&>(layer).forward(tgt); },
                              {"TransformerDecoderLayer", "forward(tgt, memory)"});
  check_error<mg::StateError>([&] { layer(tgt, mg::Tensor()); }, {"TransformerDecoderLayer", "undefined"});

  // A memory mask of the wrong length is found by the attention over memory,
  // after the self-attention's dropout has drawn: the generator is put back,
  // so the next call draws what it would have drawn without the bad one.
  mg::manual_seed(40);
  check_error<mg::ShapeError>(
      [&] { layer(tgt, memory, {}, {.key_padding_mask = mg::zeros({2, 6}, mg::DType::bool_)}); },
      {"MultiheadAttention", "key_padding_mask", "bool[2, 6]"});
  const auto after_error = layer(tgt, memory);
  mg::manual_seed(40);
  const auto clean = layer(tgt, memory);
  BOOST_TEST(values(after_error) == values(clean), boost::test_tools::per_element());

  BOOST_TEST(snapshot(layer) == before, boost::test_tools::per_element());
  BOOST_CHECK_THROW(nn::TransformerDecoderLayer(10, 4), mg::ValueError);
}

BOOST_AUTO_TEST_SUITE_END()
