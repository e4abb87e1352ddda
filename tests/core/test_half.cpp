// float16 / bfloat16 conversions against independent references: every
// 16-bit pattern round-trips, and a dense sweep of float32 bit patterns
// rounds to the nearest representable value, ties to even.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "mixgrad/half.hpp"

using mixgrad::bfloat16;
using mixgrad::half;

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Value of a binary16 pattern computed from the IEEE definition in double.
double half_value(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 31, mant = h & 1023;
  double v;
  if (exp == 31) v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (exp == 0) v = std::ldexp(mant, -24);
  else v = std::ldexp(1024 + mant, exp - 25);
  return sign ? -v : v;
}

// Nearest binary16 (ties to even) of a finite float, by search over all
// non-negative finite halfs; values past the largest half's rounding
// boundary go to infinity.
uint16_t reference_half(float f) {
  static const std::vector<double> positives = [] {
    std::vector<double> v;
    for (uint32_t h = 0; h < 0x7c00; ++h) v.push_back(half_value(static_cast<uint16_t>(h)));
    return v;
  }();
  const double a = std::fabs(static_cast<double>(f));
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (a >= 65520.0) return sign | 0x7c00;
  auto it = std::lower_bound(positives.begin(), positives.end(), a);
  uint32_t hi = static_cast<uint32_t>(it - positives.begin());
  if (hi == positives.size()) return sign | (hi - 1);  // between 65504 and the overflow boundary
  if (positives[hi] == a) return sign | hi;
  const uint32_t lo = hi - 1;
  const double dlo = a - positives[lo], dhi = positives[hi] - a;
  const uint32_t pick = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1) ? hi : lo);
  return static_cast<uint16_t>(sign | pick);
}

uint16_t reference_bfloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t lower = u & 0xffff0000u;
  const double a = std::fabs(static_cast<double>(f));
  const double lo = std::fabs(static_cast<double>(from_bits(lower)));
  // the next bfloat16 up; past the largest finite one it is 2^128, where
  // rounding overflows to infinity
  const uint32_t next = (lower & 0x7fffffffu) + 0x10000u;
  const double hi = next == 0x7f800000u ? std::ldexp(1.0, 128) : std::fabs(static_cast<double>(from_bits(next)));
  if (a == lo) return static_cast<uint16_t>(lower >> 16);
  const double dlo = a - lo, dhi = hi - a;
  const bool up = dhi < dlo || (dhi == dlo && ((lower >> 16) & 1));
  return static_cast<uint16_t>((up ? lower + 0x10000u : lower) >> 16);
}

}  // namespace

BOOST_AUTO_TEST_CASE(half_every_pattern_round_trips) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const half h = half::from_bits(static_cast<uint16_t>(b));
    const float f = h;
    const double expect = half_value(static_cast<uint16_t>(b));
    if (std::isnan(expect)) {
      BOOST_TEST_REQUIRE(std::isnan(f));
      BOOST_TEST_REQUIRE(std::isnan(static_cast<float>(half(f))));
      continue;
    }
    BOOST_TEST_REQUIRE(static_cast<double>(f) == expect);
    BOOST_TEST_REQUIRE(half(f).bits == b);
  }
}

BOOST_AUTO_TEST_CASE(half_rounds_to_nearest_even_over_a_dense_sweep) {
  int checked = 0;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4093) {
    const float f = from_bits(static_cast<uint32_t>(u));
    if (std::isnan(f)) {
      BOOST_TEST_REQUIRE(std::isnan(static_cast<float>(half(f))));
      continue;
    }
    if (std::isinf(f)) continue;
    BOOST_TEST_REQUIRE(half(f).bits == reference_half(f), "float bits " << std::hex << u);
    ++checked;
  }
  // exact ties around 1.0 and in the subnormal range
  for (float f : {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 0x1p-25f, 3 * 0x1p-25f, 65504.f, 65519.f, 65520.f})
    BOOST_TEST(half(f).bits == reference_half(f));
  BOOST_TEST(checked > 1000000);
}

BOOST_AUTO_TEST_CASE(half_specials) {
  BOOST_TEST(half(std::numeric_limits<float>::infinity()).bits == 0x7c00);
  BOOST_TEST(half(-std::numeric_limits<float>::infinity()).bits == 0xfc00);
  BOOST_TEST(half(1e6f).bits == 0x7c00);
  BOOST_TEST(half(-0.0f).bits == 0x8000);
  BOOST_TEST(half(0x1p-24f).bits == 0x0001);  // smallest subnormal
  BOOST_TEST(half(0x1p-26f).bits == 0x0000);  // below half of it: zero
}

BOOST_AUTO_TEST_CASE(bfloat16_rounds_to_nearest_even_over_a_dense_sweep) {
  for (uint64_t u = 0; u <= 0xffffffffull; u += 1021) {
    const float f = from_bits(static_cast<uint32_t>(u));
    if (std::isnan(f)) {
      BOOST_TEST_REQUIRE(std::isnan(static_cast<float>(bfloat16(f))));
      continue;
    }
    BOOST_TEST_REQUIRE(bfloat16(f).bits == reference_bfloat16(f), "float bits " << std::hex << u);
  }
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = bfloat16::from_bits(static_cast<uint16_t>(b));
    if (!std::isnan(f)) BOOST_TEST_REQUIRE(bfloat16(f).bits == b);
  }
}

BOOST_AUTO_TEST_CASE(bulk_conversions_match_scalar) {
  std::vector<float> src;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 65521) src.push_back(from_bits(static_cast<uint32_t>(u)));
  std::vector<half> h(src.size());
  std::vector<bfloat16> b(src.size());
  mixgrad::convert(src.data(), h.data(), static_cast<int64_t>(src.size()));
  mixgrad::convert(src.data(), b.data(), static_cast<int64_t>(src.size()));
  std::vector<float> hb(src.size()), bb(src.size());
  mixgrad::convert(h.data(), hb.data(), static_cast<int64_t>(src.size()));
  mixgrad::convert(b.data(), bb.data(), static_cast<int64_t>(src.size()));
  for (size_t i = 0; i < src.size(); ++i) {
    if (std::isnan(src[i])) {
      BOOST_TEST_REQUIRE(std::isnan(hb[i]));
      BOOST_TEST_REQUIRE(std::isnan(bb[i]));
      continue;
    }
    BOOST_TEST_REQUIRE(h[i].bits == half(src[i]).bits);
    BOOST_TEST_REQUIRE(b[i].bits == bfloat16(src[i]).bits);
    BOOST_TEST_REQUIRE(hb[i] == static_cast<float>(h[i]));
    BOOST_TEST_REQUIRE(bb[i] == static_cast<float>(b[i]));
  }
}
