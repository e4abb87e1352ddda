// The vector exponential of the CPU kernels (backend/cpu/vector_exp.hpp:
// attention's blocks of scores, cross-entropy's rows), through attention's
// row pass tiles::exp_minus_sum (vectors, then a scalar tail): at every width the
// kernels are built for, it gives the same bits as kernels::exp_float_nonpositive
// lane by lane (compiled here with the same flags, so with the same
// roundings) and stays within 2 ulp of std::exp, over lengths that leave
// every tail; -inf (a masked score) gives 0, NaN stays NaN, values below
// -87 flush to 0.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/attention_tiles.hpp"
#include "kernels/fast_float.hpp"

namespace {

namespace tiles = mixgrad::backend::cpu::tiles;
using mixgrad::kernels::exp_float_nonpositive;

uint32_t bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

/// Scores as the kernel sees them after subtracting the row maximum: 0, tiny
/// and moderate negatives, both sides of the -87 flush, -inf and NaN.
std::vector<float> scores(int64_t n) {
  const float special[] = {0.f, -0.f, -1e-30f, -0.5f, -1.f, -10.25f, -86.9f, -87.f, -87.01f, -100.f,
                           -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    x[static_cast<size_t>(i)] = i % 3 == 0 ? special[(i / 3) % 12] : -static_cast<float>(i % 97) * 0.913f;
  return x;
}

template <int Bytes>
void check_width() {
  for (int64_t n = 1; n <= 70; ++n) {
    const std::vector<float> in = scores(n);
    std::vector<float> out = in;
    tiles::exp_minus_sum<float, Bytes>(n, out.data(), 0.f);
    for (int64_t i = 0; i < n; ++i) {
      const float x = in[static_cast<size_t>(i)], y = out[static_cast<size_t>(i)];
      BOOST_TEST_CONTEXT("width " << Bytes << " bytes, n " << n << ", x[" << i << "] = " << x) {
        BOOST_TEST(bits(y) == bits(exp_float_nonpositive(x)));
        if (std::isnan(x)) {
          BOOST_TEST(std::isnan(y));
        } else if (x < -87.f) {
          BOOST_TEST(y == 0.f);
        } else {
          const float ref = std::exp(x);
          BOOST_TEST(std::fabs(y - ref) <= 2.f * (std::nextafter(ref, 2.f) - ref));
        }
      }
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(vector_exp)

BOOST_AUTO_TEST_CASE(vector_exp_matches_the_scalar_one_at_every_width) {
  check_width<16>();
  check_width<32>();
  check_width<64>();
}

BOOST_AUTO_TEST_SUITE_END()
