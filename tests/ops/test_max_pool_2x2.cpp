// The 2 x 2 / stride 2 max-pooling kernels (backend/cpu/max_pool_2x2)
// against a reference written here: the first maximum of each window in
// the order top left, top right, bottom left, bottom right, a NaN beating
// numbers (the first NaN), -0 and +0 tied; the output is the winning input's
// bits, the input gradient the output gradient at the winner and zero
// elsewhere (a last odd row or column included). Every floating dtype,
// widths that leave partial vectors (1 to 33 outputs per row), both
// instruction-set variants, and through F::max_pool2d against oneDNN.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/max_pool_2x2.hpp"
#include "backend/onednn/onednn.hpp"
#include "core/simd.hpp"
#include "mixgrad/mixgrad.hpp"

namespace {

namespace mg = mixgrad;
namespace pool = mixgrad::backend::cpu::max_pool_2x2;
using mg::DType;
using mg::Tensor;

// Values with ties, signed zeros, infinities and NaNs mixed into random data.
std::vector<double> tricky_values(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> pick(0, 15);
  std::normal_distribution<double> normal(0.0, 2.0);
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& e : v) {
    switch (pick(gen)) {
      case 0: e = 0.0; break;
      case 1: e = -0.0; break;
      case 2: e = 1.5; break;  // ties
      case 3: e = 1.5; break;
      case 4: e = inf; break;
      case 5: e = -inf; break;
      case 6: e = nan; break;
      case 7: e = -nan; break;
      default: e = normal(gen);
    }
  }
  return v;
}

// The reference winner (0..3) of the window at output (o, j) of one plane.
int reference_winner(const std::vector<double>& x, int64_t base, int64_t w, int64_t o, int64_t j) {
  const int64_t at[4] = {base + 2 * o * w + 2 * j, base + 2 * o * w + 2 * j + 1, base + (2 * o + 1) * w + 2 * j,
                         base + (2 * o + 1) * w + 2 * j + 1};
  int best = 0;
  for (int k = 1; k < 4; ++k) {
    const double v = x[at[k]], b = x[at[best]];
    if (v > b || (std::isnan(v) && !std::isnan(b))) best = k;
  }
  return best;
}

// Stored bits of element i of t, as a 64-bit integer.
uint64_t bits_at(const Tensor& t, int64_t i) {
  uint64_t u = 0;
  const size_t es = mg::element_size(t.dtype());
  std::memcpy(&u, static_cast<const char*>(t.raw_data()) + i * es, es);
  return u;
}

void check(DType dt, int64_t n, int64_t c, int64_t h, int64_t w, uint32_t seed) {
  const auto xv = tricky_values(n * c * h * w, seed);
  const Tensor x = mg::tensor(xv, {n, c, h, w}, dt);
  const auto xr = x.to_vector<double>();  // as rounded to dt
  const int64_t oh = h / 2, ow = w / 2;
  const Tensor y = mg::empty({n, c, oh, ow}, dt), win = mg::empty({n, c, oh, ow}, DType::bool_);
  pool::forward(x, y, win);
  mg::manual_seed(seed);
  const Tensor gy = mg::normal({n, c, oh, ow}, 0, 1, dt);
  const Tensor gx = mg::full({n, c, h, w}, 42.0, dt);  // every element must be written
  pool::backward(gy, win, gx);
  const auto* wp = static_cast<const uint8_t*>(win.raw_data());
  bool ok = true;
  std::vector<bool> is_winner(xr.size(), false);
  for (int64_t p = 0; p < n * c && ok; ++p)
    for (int64_t o = 0; o < oh && ok; ++o)
      for (int64_t j = 0; j < ow && ok; ++j) {
        const int64_t out = (p * oh + o) * ow + j;
        const int want = reference_winner(xr, p * h * w, w, o, j);
        const int64_t src = p * h * w + (2 * o + want / 2) * w + 2 * j + want % 2;
        is_winner[src] = true;
        ok = wp[out] == want && bits_at(y, out) == bits_at(x, src) && bits_at(gx, src) == bits_at(gy, out);
        BOOST_TEST(ok, "output " << out << ": winner " << int(wp[out]) << " want " << want);
      }
  for (size_t i = 0; i < xr.size() && ok; ++i)
    if (!is_winner[i]) {
      ok = bits_at(gx, static_cast<int64_t>(i)) == 0;  // +0
      BOOST_TEST(ok, "gradient " << i << " of a non-winner is not +0");
    }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(max_pool_2x2)

BOOST_AUTO_TEST_CASE(applies_only_to_2x2_stride_2_unpadded) {
  BOOST_TEST(pool::applies({.kernel = 2, .stride = 2, .padding = 0}));
  BOOST_TEST(!pool::applies({.kernel = 2, .stride = 1, .padding = 0}));
  BOOST_TEST(!pool::applies({.kernel = 3, .stride = 2, .padding = 0}));
  BOOST_TEST(!pool::applies({.kernel = 2, .stride = 2, .padding = 1}));
  BOOST_TEST(!pool::applies({.kernel = {2, 3}, .stride = 2, .padding = 0}));
}

BOOST_AUTO_TEST_CASE(matches_the_reference_bit_for_bit) {
  std::vector<mg::simd::Level> levels{mg::simd::Level::portable};
  if (mg::simd::available() == mg::simd::Level::avx512) levels.push_back(mg::simd::Level::avx512);
  for (auto level : levels) {
    mg::simd::LevelScope scope(level);
    for (DType dt : {DType::float32, DType::bfloat16, DType::float16, DType::float64})
      for (int64_t w : {2, 3, 14, 15, 28, 32, 33, 34, 66, 67})  // 1 .. 33 outputs per row, odd widths
        for (int64_t h : {2, 5, 8}) {
          BOOST_TEST_CONTEXT(mg::to_string(dt) << " h " << h << " w " << w << " level " << int(level)) {
            check(dt, 3, 2, h, w, static_cast<uint32_t>(h * 100 + w));
          }
        }
    // Large enough to split planes across threads.
    BOOST_TEST_CONTEXT("threaded, level " << int(level)) { check(DType::bfloat16, 16, 8, 28, 28, 7); }
  }
}

BOOST_AUTO_TEST_CASE(max_pool2d_agrees_with_onednn) {
  if (!mg::backend::onednn::built()) return;
  namespace dnn = mg::backend::onednn;
  for (DType dt : {DType::float32, DType::bfloat16}) {
    mg::manual_seed(41);
    const Tensor x0 = mg::normal({4, 5, 14, 15}, 0, 1, dt);
    const Tensor gy = mg::normal({4, 5, 7, 7}, 0, 1, dt);
    auto run = [&](dnn::Mode m) {
      dnn::ModeScope scope(m);
      Tensor x = x0.clone();
      mg::autodiff::GradManager gm;
      gm.attach(x);
      Tensor y;
      {
        auto rec = gm.record();
        y = mg::F::max_pool2d(x, {.kernel_size = 2});
        gm.backward(y, gy);
      }
      return std::vector<std::vector<double>>{y.to_vector<double>(), x.grad().to_vector<double>()};
    };
    const auto own = run(dnn::Mode::automatic), ref = run(dnn::Mode::always);
    BOOST_TEST(own[0] == ref[0], boost::test_tools::per_element());
    BOOST_TEST(own[1] == ref[1], boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_SUITE_END()
