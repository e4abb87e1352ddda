// Host tests of the plan behind fused attention on CUDA
// (src/backend/cuda/attention_plan.hpp): which calls cuDNN takes, and the
// dims and strides each tensor is handed to it with. The descriptors are read
// here with a reference loop, as cuDNN's sdpa reads them (scores = scale q k^T
// + bias, the causal cut top-left, softmax, times v; stats = the rows'
// log-sum-exp), over a KV-cache layout and a broadcast additive mask, and
// compared with the CPU kernel's output and log-sum-exp.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "backend/attention.hpp"
#include "backend/cuda/attention_plan.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace be = mixgrad::backend;
namespace plan = mixgrad::backend::cuda_plan;

namespace {

/// The element of a float32 tensor's storage at `idx` through a descriptor.
float at(const mg::Tensor& t, const plan::GraphDesc4& d, std::array<int64_t, 4> idx) {
  int64_t off = 0;
  for (int i = 0; i < 4; ++i) {
    BOOST_REQUIRE(idx[i] < d.dims[i]);
    off += idx[i] * d.strides[i];
  }
  return t.data<float>()[off];
}

/// The layout of a [N, H, len, E] view whose last dim has unit stride.
be::HeadLayout layout_of(const mg::Tensor& t) {
  return {.batch = t.strides()[0], .head = t.strides()[1], .row = t.strides()[2]};
}

be::AttentionArgs args_of(const mg::Tensor& q, const mg::Tensor& k, const mg::Tensor& v) {
  const int64_t N = q.size(0), H = q.size(1), L = q.size(2), E = q.size(3), S = k.size(2);
  return be::AttentionArgs{.q = q, .k = k, .v = v, .mask = mg::Tensor(), .mask_kind = be::AttentionMask::none,
                           .mask_strides = {}, .causal = false, .scale = 1.0 / std::sqrt(double(E)),
                           .n = N, .heads = H, .kv_heads = H, .q_len = L, .kv_len = S, .head_dim = E,
                           .value_dim = E, .q_layout = layout_of(q), .k_layout = layout_of(k),
                           .v_layout = layout_of(v)};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_attention_plan)

BOOST_AUTO_TEST_CASE(cudnn_takes_16_bit_dense_heads_and_refuses_the_rest_with_a_reason) {
  const mg::Tensor q16 = mg::zeros({1, 2, 16, 64}, mg::DType::float16);
  be::AttentionArgs a = args_of(q16, q16, q16);
  BOOST_TEST(plan::attention_unsupported(a).empty());
  a.q = q16.to(mg::DType::bfloat16);
  BOOST_TEST(plan::attention_unsupported(a).empty());
  a.causal = true;
  a.mask_kind = be::AttentionMask::add;
  BOOST_TEST(plan::attention_unsupported(a).empty());

  auto refused = [&](be::AttentionArgs b, const std::string& word) {
    const std::string why = plan::attention_unsupported(b);
    BOOST_TEST(why.find(word) != std::string::npos, "'" << why << "' should name " << word);
  };
  // Each change to a call cuDNN takes, and the word its refusal must name.
  const std::vector<std::pair<std::function<void(be::AttentionArgs&)>, std::string>> changes = {
      {[](be::AttentionArgs& b) { b.q = mg::zeros({1, 2, 16, 64}); }, "float32"},
      {[](be::AttentionArgs& b) { b.head_dim = b.value_dim = 12; }, "multiple of 8"},
      {[](be::AttentionArgs& b) { b.head_dim = b.value_dim = 256; }, "multiple of 8"},
      {[](be::AttentionArgs& b) { b.value_dim = 32; }, "value dim"},
      {[](be::AttentionArgs& b) { b.kv_heads = 1; }, "grouped"},
      {[](be::AttentionArgs& b) { b.mask_kind = be::AttentionMask::keep; }, "boolean"},
      {[](be::AttentionArgs& b) { b.kv_len = 0; }, "empty"},
      {[](be::AttentionArgs& b) { b.q_len = 15; }, "decoding"},
      {[](be::AttentionArgs& b) { b.k_layout.row = 68; }, "stride"},
      {[](be::AttentionArgs& b) { b.v_layout.row = 0; }, "stride"},
  };
  for (const auto& [change, word] : changes) {
    be::AttentionArgs b = args_of(q16, q16, q16);
    change(b);
    refused(b, word);
  }
}

// A KV cache of capacity 9 holding 7 positions, 5 queries after them under
// the causal cut, and an additive mask [H, L, S] broadcast over the batch.
BOOST_AUTO_TEST_CASE(descriptors_read_as_cudnn_does_give_the_cpu_kernels_output_and_log_sum_exp) {
  const int64_t N = 2, H = 3, L = 5, S = 7, cap = 9, E = 8;
  // q as the heads of a packed projection: a [N, L, H, E] tensor seen as [N, H, L, E], rows H * E apart.
  const mg::Tensor q = mg::F::transpose(mg::normal({N, L, H, E}, 0.0, 1.0), 1, 2);
  const mg::Tensor k_cache = mg::normal({N, H, cap, E}, 0.0, 1.0), v_cache = mg::normal({N, H, cap, E}, 0.0, 1.0);
  const mg::Tensor k = k_cache.narrow(2, 0, S), v = v_cache.narrow(2, 0, S);
  be::AttentionArgs a = args_of(q, k, v);
  a.causal = true;
  a.scale = 0.3;
  a.mask = mg::normal({H, L, S}, 0.0, 1.0);
  a.mask_kind = be::AttentionMask::add;
  a.mask_strides = {0, L * S, S, 1};

  const plan::AttentionPlan p = plan::make_attention_plan(a);
  BOOST_TEST(p.has_bias);
  BOOST_TEST(p.causal);
  BOOST_TEST((p.bias.dims == std::vector<int64_t>{1, H, L, S}));
  BOOST_TEST((p.q.strides == std::vector<int64_t>{L * H * E, E, H * E, 1}));  // q and k read in place
  BOOST_TEST((p.k.strides == std::vector<int64_t>{H * cap * E, cap * E, E, 1}));
  BOOST_TEST((p.dq.strides == std::vector<int64_t>{H * L * E, L * E, E, 1}));  // gradients are dense
  BOOST_TEST((p.dk.strides == std::vector<int64_t>{H * S * E, S * E, E, 1}));
  const mg::Tensor bias = plan::dense_bias(a, mg::DType::float32);
  BOOST_TEST(bias.is_contiguous());

  be::AttentionOutputs o{.out = mg::empty({N, H, L, E}), .lse = mg::empty({N, H, L})};
  be::attention_forward(a, o);

  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i) {
        std::vector<double> s(S, -std::numeric_limits<double>::infinity());
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= std::min(i, S - 1); ++j) {  // causal, top-left
          double dot = 0;
          for (int64_t e = 0; e < E; ++e) dot += double(at(q, p.q, {n, h, i, e})) * at(k, p.k, {n, h, j, e});
          s[j] = p.scale * dot + at(bias, p.bias, {0, h, i, j});
          m = std::max(m, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < S; ++j) sum += std::exp(s[j] - m);
        const double lse = m + std::log(sum);
        BOOST_TEST(std::abs(at(o.lse, p.stats, {n, h, i, 0}) - lse) < 1e-4, "lse " << n << h << i);
        for (int64_t e = 0; e < E; ++e) {
          double out = 0;
          for (int64_t j = 0; j < S; ++j) out += std::exp(s[j] - lse) * at(v, p.v, {n, h, j, e});
          BOOST_TEST(std::abs(at(o.out, p.out, {n, h, i, e}) - out) < 1e-4, "out " << n << h << i << e);
        }
      }
}

BOOST_AUTO_TEST_SUITE_END()
