// Transformer modules: MultiheadAttention, TransformerEncoderLayer and
// RMSNorm against their definitions written out with F:: ops, PyTorch's
// state-dict names and mask conventions, GELU's tanh form, and a small
// encoder that learns under bf16 autocast.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "mixgrad/mixgrad.hpp"
#include "../common/test_util.hpp"

namespace {

namespace mg = mixgrad;
namespace nn = mixgrad::nn;
namespace F = mixgrad::F;
using test_util::check_close;
using test_util::message_has;
using test_util::randn;
using test_util::values;

std::vector<std::string> names(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [name, t] : m.named_parameters()) out.push_back(name + " " + mg::to_string(t.shape()));
  return out;
}

/// nn.MultiheadAttention's definition on [N, L, E] inputs, written out.
mg::Tensor mha_by_hand(nn::MultiheadAttention& m, const mg::Tensor& q, const mg::Tensor& k, const mg::Tensor& v,
                       const F::AttentionOptions& o = {}) {
  const int64_t E = m.embed_dim(), H = m.num_heads(), D = E / H, N = q.size(0), L = q.size(1), S = k.size(1);
  auto part = [&](const mg::Tensor& x, int64_t i) {
    return F::linear(x, F::narrow(m.in_proj_weight(), 0, i * E, E), F::narrow(m.in_proj_bias(), 0, i * E, E));
  };
  auto heads = [&](const mg::Tensor& t, int64_t len) { return F::transpose(F::reshape(t, {N, len, H, D}), 1, 2); };
  const auto y = F::scaled_dot_product_attention(heads(part(q, 0), L), heads(part(k, 1), S), heads(part(v, 2), S), o);
  return m.out_proj()(F::reshape(F::transpose(y, 1, 2), {N, L, E}));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(transformer)

BOOST_AUTO_TEST_CASE(multihead_attention_has_pytorchs_parameters) {
  nn::MultiheadAttention m(16, 4);
  const std::vector<std::string> want = {"in_proj_weight [48, 16]", "in_proj_bias [48]", "out_proj.weight [16, 16]",
                                         "out_proj.bias [16]"};
  BOOST_TEST(names(m) == want, boost::test_tools::per_element());
  for (double b : values(m.in_proj_bias())) BOOST_TEST(b == 0.0);
  for (double b : values(m.out_proj().bias())) BOOST_TEST(b == 0.0);
  // xavier_uniform: |w| <= sqrt(6 / (fan_in + fan_out)) = sqrt(6 / 64)
  for (double w : values(m.in_proj_weight())) BOOST_TEST(std::abs(w) <= std::sqrt(6.0 / 64.0));
  BOOST_CHECK_THROW(nn::MultiheadAttention(10, 4), mg::ValueError);
}

BOOST_AUTO_TEST_CASE(multihead_attention_matches_its_definition_in_both_layouts) {
  nn::MultiheadAttention seq_first(16, 4);
  nn::MultiheadAttention batch_first(16, 4, {.batch_first = true});
  batch_first.load_state_dict(seq_first.state_dict());
  const auto x = randn({2, 5, 16}, 1), kv = randn({2, 7, 16}, 2);
  check_close(batch_first(x), mha_by_hand(seq_first, x, x, x));
  check_close(batch_first.forward(x, kv, kv), mha_by_hand(seq_first, x, kv, kv));
  // [L, N, E] in, [L, N, E] out
  check_close(seq_first(F::transpose(x, 0, 1)), F::transpose(mha_by_hand(seq_first, x, x, x), 0, 1));
  // unbatched [L, E]
  check_close(batch_first(F::narrow(x, 0, 0, 1).reshape({5, 16})),
              F::reshape(mha_by_hand(seq_first, F::narrow(x, 0, 0, 1), F::narrow(x, 0, 0, 1), F::narrow(x, 0, 0, 1)),
                         {5, 16}));
}

// PyTorch's MultiheadAttention masks: true blocks (the opposite of SDPA's).
BOOST_AUTO_TEST_CASE(multihead_attention_masks_follow_pytorch) {
  nn::MultiheadAttention m(8, 2, {.batch_first = true});
  const auto x = randn({2, 4, 8}, 3);
  std::vector<bool> blocked(16);
  for (int i = 0; i < 16; ++i) blocked[i] = (i % 4) > (i / 4);  // above the diagonal
  const auto mask = mg::tensor<bool>(blocked, {4, 4});
  const auto causal = m.forward(x, x, x, {.is_causal = true});
  check_close(m.forward(x, x, x, {.attn_mask = mask}), causal);
  check_close(causal, mha_by_hand(m, x, x, x, {.is_causal = true}));
  // A padded key is ignored: changing it changes nothing.
  const auto pad = mg::tensor<bool>({false, false, false, true, false, false, false, true}, {2, 4});
  auto x2 = x.clone();
  x2.data<float>()[3 * 8] += 5.0f;  // batch 0, position 3
  const auto a = m.forward(x, x2, x2, {.key_padding_mask = pad});
  const auto b = m.forward(x, x, x, {.key_padding_mask = pad});
  check_close(a, b);
  // padding and causal together
  const auto both = m.forward(x, x2, x2, {.key_padding_mask = pad, .is_causal = true});
  check_close(F::narrow(both, 1, 0, 3), F::narrow(m.forward(x, x, x, {.key_padding_mask = pad, .is_causal = true}), 1, 0, 3));
  try {
    m.forward(x, x, x, {.key_padding_mask = mg::ones({2, 5}, mg::DType::bool_)});
    BOOST_FAIL("a key_padding_mask of the wrong length was accepted");
  } catch (const mg::ShapeError& e) {
    BOOST_TEST(message_has(e, {"MultiheadAttention", "key_padding_mask", "[2, 4]", "bool[2, 5]"}), e.what());
  }
}

BOOST_AUTO_TEST_CASE(encoder_layer_has_pytorchs_parameters_and_definition) {
  for (bool norm_first : {false, true}) {
    nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 12, .dropout = 0.0, .activation = nn::Activation::gelu,
                                             .batch_first = true, .norm_first = norm_first});
    const std::vector<std::string> want = {"self_attn.in_proj_weight [24, 8]", "self_attn.in_proj_bias [24]",
                                           "self_attn.out_proj.weight [8, 8]", "self_attn.out_proj.bias [8]",
                                           "linear1.weight [12, 8]",           "linear1.bias [12]",
                                           "linear2.weight [8, 12]",           "linear2.bias [8]",
                                           "norm1.weight [8]",                 "norm1.bias [8]",
                                           "norm2.weight [8]",                 "norm2.bias [8]"};
    BOOST_TEST(names(layer) == want, boost::test_tools::per_element());
    const auto x = randn({2, 5, 8}, 4);
    const auto p = layer.named_parameters();
    auto param = [&](const std::string& n) {
      for (const auto& [name, t] : p)
        if (name == n) return t;
      return mg::Tensor();
    };
    auto ln = [&](const mg::Tensor& t, const char* which) {
      return F::layer_norm(t, {8}, param(std::string(which) + ".weight"), param(std::string(which) + ".bias"));
    };
    auto ff = [&](const mg::Tensor& t) {
      return F::linear(F::gelu(F::linear(t, param("linear1.weight"), param("linear1.bias"))), param("linear2.weight"),
                       param("linear2.bias"));
    };
    auto sa = [&](const mg::Tensor& t) { return mha_by_hand(layer.self_attn(), t, t, t); };
    mg::Tensor want_y;
    if (norm_first) {
      const auto h = F::add(x, sa(ln(x, "norm1")));
      want_y = F::add(h, ff(ln(h, "norm2")));
    } else {
      const auto h = ln(F::add(x, sa(x)), "norm1");
      want_y = ln(F::add(h, ff(h)), "norm2");
    }
    check_close(layer(x), want_y, 1e-4);
  }
}

BOOST_AUTO_TEST_CASE(rms_norm_matches_its_definition) {
  nn::RMSNorm norm(6, {.eps = 1e-6});
  BOOST_TEST(names(norm) == std::vector<std::string>{"weight [6]"}, boost::test_tools::per_element());
  const auto x = randn({3, 6}, 5);
  const auto xv = values(x);
  const auto y = values(norm(x));
  for (int r = 0; r < 3; ++r) {
    double ms = 0;
    for (int c = 0; c < 6; ++c) ms += xv[r * 6 + c] * xv[r * 6 + c] / 6.0;
    for (int c = 0; c < 6; ++c) BOOST_TEST(std::abs(y[r * 6 + c] - xv[r * 6 + c] / std::sqrt(ms + 1e-6)) < 1e-5);
  }
  // As PyTorch: normalised in float32, rounded to the input's dtype, then
  // times the weight with type promotion (a float32 weight gives float32).
  auto xb = F::astype(x, mg::DType::bfloat16);
  BOOST_TEST(nn::RMSNorm(6, {.elementwise_affine = false})(xb).dtype() == mg::DType::bfloat16);
  BOOST_TEST(nn::RMSNorm(6)(xb).dtype() == mg::DType::float32);
  BOOST_CHECK_THROW(norm(randn({3, 5}, 6)), mg::ShapeError);
  BOOST_CHECK_THROW(nn::RMSNorm(6, {.eps = -1.0}), mg::ValueError);
}

BOOST_AUTO_TEST_CASE(gelu_tanh_is_gpt2s_formula) {
  const std::vector<double> xs = {-3.0, -1.0, -0.1, 0.0, 0.5, 1.0, 2.5};
  const auto y = values(F::gelu(mg::tensor(xs, {7}, mg::DType::float64), F::GeluApproximation::tanh));
  for (size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i];
    BOOST_TEST(std::abs(y[i] - 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)))) < 1e-12);
  }
  BOOST_TEST(std::abs(y[5] - 0.8411919906082768) < 1e-12);  // PyTorch's value at 1
}

// A two-layer pre-norm encoder learns to add the mean over positions to its
// input (only attention mixes positions) under bf16 autocast.
BOOST_AUTO_TEST_CASE(a_small_encoder_learns_under_autocast) {
  mg::manual_seed(0);
  nn::TransformerEncoderLayer l1(16, 4, {.dim_feedforward = 32, .dropout = 0.0, .batch_first = true, .norm_first = true});
  nn::TransformerEncoderLayer l2(16, 4, {.dim_feedforward = 32, .dropout = 0.0, .batch_first = true, .norm_first = true});
  std::vector<mg::Tensor> params = l1.parameters();
  for (const auto& p : l2.parameters()) params.push_back(p);
  mg::optim::AdamW opt(params, {.lr = 1e-2});
  mg::autodiff::GradManager gm;
  gm.attach(params);
  auto loss_at = [&](int step) {
    const auto x = randn({8, 6, 16}, 100 + step);
    const auto target = F::add(x, F::broadcast_to(F::mean(x, {1}, true), {8, 6, 16}));
    mg::Tensor loss;
    {
      auto rec = gm.record();
      mg::amp::autocast ac(true, mg::DType::bfloat16);
      loss = F::mse_loss(F::astype(l2(l1(x)), mg::DType::float32), target);
      gm.backward(loss);
    }
    opt.step();
    opt.zero_grad();
    return values(loss)[0];
  };
  const double first = loss_at(0);
  double last = first;
  for (int s = 1; s < 150; ++s) last = loss_at(s);
  BOOST_TEST(last < 0.5 * first, "loss " << first << " -> " << last);
  BOOST_TEST_MESSAGE("loss " << first << " -> " << last);
}

BOOST_AUTO_TEST_SUITE_END()
