// Device tests of fused attention on CUDA: cuDNN's scaled dot-product
// attention (src/backend/cuda/attention.cpp) against the CPU kernel, forward
// and backward, in float16 and bfloat16, with and without the causal cut and
// an additive mask, over dense heads and a KV cache's strided keys; and the
// calls cuDNN does not take (float32, grouped-query heads, a boolean mask),
// which must run the composed math and agree just as well. Part of the
// test_cuda_device executable (whose main exits 77 without a device).
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "device_test_support.hpp"
#include "mixgrad/mixgrad.hpp"

using namespace device_test;

namespace {

// Sums over up to 96 keys, in another order and with 16-bit intermediates
// (cuDNN rounds the probabilities to the input dtype before the second product).
constexpr Tolerances kAttentionTolerances{1e-2, 6e-2, 1e-5, 1e-12};

/// Whether the GPU has cuDNN's fused attention kernels (Ampere or later) and
/// the build has the frontend: then a call cuDNN takes must run there.
bool expects_cudnn() { return mg::cuda::fused_attention_available(0); }

mg::Tensor sdpa(const std::vector<mg::Tensor>& xs, const mg::Tensor& mask, bool causal) {
  const mg::Tensor m = mask.defined() ? mask.to(xs[0].device()) : mask;
  const bool grouped = xs[0].size(1) != xs[1].size(1);
  return mg::F::scaled_dot_product_attention(xs[0], xs[1], xs[2],
                                             {.attn_mask = m, .is_causal = causal, .enable_gqa = grouped});
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_device_attention)

BOOST_AUTO_TEST_CASE(cudnn_attention_matches_the_cpu_in_16_bits_forward_and_backward) {
  const bool fused = expects_cudnn();
  for (mg::DType dt : {mg::DType::float16, mg::DType::bfloat16})
    for (int mode = 0; mode < 3; ++mode) {  // no mask, causal, an additive mask (PyTorch takes one or the other)
      const bool causal = mode == 1, with_mask = mode == 2;
      BOOST_TEST_CONTEXT("dtype " << dt << " causal " << causal << " mask " << with_mask) {
        mg::manual_seed(11);
        const mg::Tensor q = mg::normal({2, 4, 64, 64}, 0.0, 1.0).to(dt);
        const mg::Tensor k = mg::normal({2, 4, 96, 64}, 0.0, 1.0).to(dt);
        const mg::Tensor v = mg::normal({2, 4, 96, 64}, 0.0, 1.0).to(dt);
        const mg::Tensor mask = with_mask ? mg::normal({4, 64, 96}, 0.0, 0.5).to(dt) : mg::Tensor();
        const int64_t before = mg::cuda::fused_attention_calls();
        check_against_cpu([&](const auto& xs) { return sdpa(xs, mask, causal); }, {q, k, v},
                          kAttentionTolerances.of(dt), seeded_normal(5));
        // The forward and the backward each ran on cuDNN.
        if (fused) BOOST_TEST(mg::cuda::fused_attention_calls() == before + 2);
      }
    }
}

BOOST_AUTO_TEST_CASE(cudnn_attention_reads_a_kv_caches_keys_in_place) {
  const bool fused = expects_cudnn();
  const mg::DType dt = mg::DType::bfloat16;
  mg::manual_seed(12);
  const mg::Tensor q = mg::normal({1, 2, 32, 64}, 0.0, 1.0).to(dt);
  const mg::Tensor k_cache = mg::normal({1, 2, 128, 64}, 0.0, 1.0).to(dt);
  const mg::Tensor v_cache = mg::normal({1, 2, 128, 64}, 0.0, 1.0).to(dt);
  const int64_t before = mg::cuda::fused_attention_calls();
  const mg::Tensor out = mg::F::scaled_dot_product_attention(q.to(kGpu), k_cache.to(kGpu).narrow(2, 0, 80),
                                                             v_cache.to(kGpu).narrow(2, 0, 80));
  const mg::Tensor want = mg::F::scaled_dot_product_attention(q, k_cache.narrow(2, 0, 80), v_cache.narrow(2, 0, 80));
  check_close(out, want, kAttentionTolerances.of(dt), "output");
  if (fused) BOOST_TEST(mg::cuda::fused_attention_calls() == before + 1);
}

BOOST_AUTO_TEST_CASE(calls_cudnn_does_not_take_run_the_composed_math) {
  mg::manual_seed(13);
  const int64_t before = mg::cuda::fused_attention_calls();
  const mg::Tensor q32 = mg::normal({1, 4, 32, 32}, 0.0, 1.0), kv32 = mg::normal({1, 4, 40, 32}, 0.0, 1.0);
  check_against_cpu([](const auto& xs) { return sdpa(xs, mg::Tensor(), true); }, {q32, kv32, kv32},
                    kAttentionTolerances.of(mg::DType::float32), seeded_normal(6));
  const mg::DType dt = mg::DType::float16;
  const mg::Tensor q = q32.to(dt), kv_grouped = mg::normal({1, 2, 40, 32}, 0.0, 1.0).to(dt);
  check_against_cpu([](const auto& xs) { return sdpa(xs, mg::Tensor(), false); }, {q, kv_grouped, kv_grouped},
                    kAttentionTolerances.of(dt), seeded_normal(7));
  const mg::Tensor keep = mg::F::lt(mg::uniform({32, 40}, 0.0, 1.0), 0.8);
  check_against_cpu([&](const auto& xs) { return sdpa(xs, keep, false); }, {q, kv32.to(dt), kv32.to(dt)},
                    kAttentionTolerances.of(dt), seeded_normal(8));
  BOOST_TEST(mg::cuda::fused_attention_calls() == before);
}

BOOST_AUTO_TEST_SUITE_END()
