// The 16-bit NCHW <-> [N, C/16, H, W, 16] transposes that stand in for
// oneDNN's reorders around bfloat16 convolutions: every element lands where
// the blocked layout's index formula says, with spatial sizes that leave
// partial tiles, and a bfloat16 convolution (forward and both gradients)
// gives the same bits with them as with oneDNN's reorders.
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <numeric>
#include <optional>
#include <vector>

#include "backend/cpu/channel_blocks.hpp"
#include "backend/onednn/onednn.hpp"
#include "core/simd.hpp"
#include "mixgrad/mixgrad.hpp"

namespace {

namespace mg = mixgrad;
namespace blocks = mixgrad::backend::cpu::channel_blocks;

}  // namespace

BOOST_AUTO_TEST_SUITE(channel_blocks)

BOOST_AUTO_TEST_CASE(transposes_follow_the_blocked_index) {
  if (!blocks::available(16)) return;
  BOOST_TEST(!blocks::available(24));
  BOOST_TEST(!blocks::available(0));
  for (int64_t hw : {1, 15, 16, 17, 49, 196, 784})
    for (int64_t c : {16, 48}) {
      const int64_t n = hw > 100 ? 3 : 40;  // small planes: enough blocks to go parallel
      std::vector<uint16_t> plain(static_cast<size_t>(n * c * hw));
      std::iota(plain.begin(), plain.end(), uint16_t{1});
      std::vector<uint16_t> blocked(plain.size(), 0), back(plain.size(), 0);
      blocks::to_blocked(plain.data(), blocked.data(), n, c, hw);
      bool ok = true;
      for (int64_t ni = 0; ni < n && ok; ++ni)
        for (int64_t ci = 0; ci < c && ok; ++ci)
          for (int64_t p = 0; p < hw && ok; ++p)
            ok = blocked[static_cast<size_t>(((ni * (c / 16) + ci / 16) * hw + p) * 16 + ci % 16)] ==
                 plain[static_cast<size_t>((ni * c + ci) * hw + p)];
      BOOST_TEST(ok, "to_blocked, hw " << hw << " c " << c);
      blocks::from_blocked(blocked.data(), back.data(), n, c, hw);
      BOOST_TEST(back == plain, "from_blocked, hw " << hw << " c " << c);
    }
}

BOOST_AUTO_TEST_CASE(bfloat16_convolution_matches_onednn_reorders_bit_for_bit) {
  // Only native bfloat16 convolutions run on 16-bit blocked layouts.
  if (!mg::backend::onednn::built() || !blocks::available(16) || !mg::cpu::has_fast_math(mg::DType::bfloat16)) return;
  mg::manual_seed(31);
  const mg::Tensor x0 = mg::normal({8, 16, 13, 11}, 0, 1, mg::DType::bfloat16);
  const mg::Tensor w0 = mg::normal({32, 16, 3, 3}, 0, 0.2, mg::DType::bfloat16);
  const mg::Tensor gy = mg::normal({8, 32, 13, 11}, 0, 1, mg::DType::bfloat16);
  auto run = [&](bool own_transposes) {
    std::optional<blocks::OffScope> off;
    if (!own_transposes) off.emplace();  // oneDNN reorders
    mg::Tensor x = x0.clone(), w = w0.clone();
    mg::autodiff::GradManager gm;
    gm.attach(x).attach(w);
    mg::Tensor y;
    {
      auto rec = gm.record();
      y = mg::F::conv2d(x, w, mg::Tensor(), {.padding = 1});
      gm.backward(y, gy);
    }
    return std::vector<std::vector<float>>{y.to_vector<float>(), x.grad().to_vector<float>(),
                                           w.grad().to_vector<float>()};
  };
  const auto own = run(true), onednn = run(false);
  for (size_t k = 0; k < own.size(); ++k) BOOST_TEST(own[k] == onednn[k], "result " << k);
}

BOOST_AUTO_TEST_SUITE_END()
