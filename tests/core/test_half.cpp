// float16 / bfloat16 conversions against independent references: every
// 16-bit pattern round-trips, and a dense sweep of float32 bit patterns
// rounds to the nearest representable value, ties to even.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/simd.hpp"
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

// Bulk conversions equal the scalar ones bit for bit, NaN payloads and
// subnormals included, at every length (vector bodies and masked or scalar
// tails) and for every instruction-set variant this CPU runs.
BOOST_AUTO_TEST_CASE(bulk_conversions_match_scalar_on_special_values_and_tails) {
  std::vector<uint32_t> bits{0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00400000u, 0x007fffffu,
                             0x00800000u, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7f800001u,
                             0x7fc00000u, 0xffc00001u, 0x7fbfffffu, 0x7f8ffff0u, 0x3f808000u, 0x3f818000u,
                             0x3f807fffu, 0x3f808001u, 0x7f7f8000u, 0x33800000u, 0x33000000u, 0x387fe000u,
                             0x477ff000u, 0x477fefffu, 0x38800000u, 0x3f800000u, 0xbf8c0000u, 0x0000ffffu};
  std::mt19937 gen(17);
  for (int i = 0; i < 200; ++i) bits.push_back(static_cast<uint32_t>(gen()));
  std::vector<float> src(bits.size());
  std::memcpy(src.data(), bits.data(), bits.size() * 4);
  std::vector<uint16_t> hb16(src.size());  // the 16-bit patterns back to float
  for (size_t i = 0; i < bits.size(); ++i) hb16[i] = static_cast<uint16_t>(bits[i] ^ (bits[i] >> 16));

  std::vector<mixgrad::simd::Level> levels{mixgrad::simd::Level::portable};
  if (mixgrad::simd::available() >= mixgrad::simd::Level::avx2) levels.push_back(mixgrad::simd::Level::avx2);
  if (mixgrad::simd::available() == mixgrad::simd::Level::avx512) levels.push_back(mixgrad::simd::Level::avx512);
  for (auto level : levels) {
    mixgrad::simd::LevelScope scope(level);
    for (size_t len : {size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{15}, size_t{16}, size_t{17}, size_t{31},
                       size_t{33}, src.size()}) {
      for (size_t start : {size_t{0}, size_t{3}}) {
        const size_t n = std::min(len, src.size() - start);
        std::vector<bfloat16> b(n + 1, bfloat16::from_bits(0x5555));
        std::vector<half> h(n + 1, half::from_bits(0x5555));
        mixgrad::convert(src.data() + start, b.data(), static_cast<int64_t>(n));
        mixgrad::convert(src.data() + start, h.data(), static_cast<int64_t>(n));
        for (size_t i = 0; i < n; ++i) {
          BOOST_TEST_REQUIRE(b[i].bits == bfloat16(src[start + i]).bits,
                             "level " << int(level) << " bits " << std::hex << bits[start + i]);
          // float16 NaN payloads follow the hardware conversion; everything else is exact.
          if (!std::isnan(src[start + i])) BOOST_TEST_REQUIRE(h[i].bits == half(src[start + i]).bits);
          else BOOST_TEST_REQUIRE(std::isnan(static_cast<float>(h[i])));
        }
        BOOST_TEST(b[n].bits == 0x5555);  // nothing written past the end
        BOOST_TEST(h[n].bits == 0x5555);

        std::vector<bfloat16> b16(n);
        std::vector<half> h16(n);
        for (size_t i = 0; i < n; ++i) {
          b16[i] = bfloat16::from_bits(hb16[start + i]);
          h16[i] = half::from_bits(hb16[start + i]);
        }
        std::vector<float> fb(n + 1, 42.0f), fh(n + 1, 42.0f);
        mixgrad::convert(b16.data(), fb.data(), static_cast<int64_t>(n));
        mixgrad::convert(h16.data(), fh.data(), static_cast<int64_t>(n));
        for (size_t i = 0; i < n; ++i) {
          const float wb = b16[i], wh = h16[i];
          BOOST_TEST_REQUIRE(std::memcmp(&fb[i], &wb, 4) == 0);
          if (std::isnan(wh)) BOOST_TEST_REQUIRE(std::isnan(fh[i]));
          else BOOST_TEST_REQUIRE(std::memcmp(&fh[i], &wh, 4) == 0);
        }
        BOOST_TEST(fb[n] == 42.0f);
        BOOST_TEST(fh[n] == 42.0f);
      }
    }
  }
}
