// Philox4x32-10 counter-based generator (Salmon et al., SC'11): the n-th
// random number depends only on (seed, n), so results are the same on any
// thread count and on any device.
#pragma once

#include <cmath>
#include <cstdint>

#include "mixgrad/half.hpp"

namespace mixgrad::kernels {

MIXGRAD_HOST_DEVICE inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

/// The four words of one Philox block. A plain array wrapper rather than
/// std::array, whose operator[] is host-only for nvcc.
struct PhiloxWords {
  uint32_t w[4];
  MIXGRAD_HOST_DEVICE constexpr uint32_t operator[](int k) const { return w[k]; }
};

/// Four 32-bit random words for counter `ctr` under key `seed`.
MIXGRAD_HOST_DEVICE inline PhiloxWords philox(uint64_t seed, uint64_t ctr) {
  uint32_t c0 = static_cast<uint32_t>(ctr), c1 = static_cast<uint32_t>(ctr >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(0xD2511F53u, c0, hi0, lo0);
    mulhilo(0xCD9E8D57u, c2, hi1, lo1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

/// A float in [0, 1) from 24 random bits.
MIXGRAD_HOST_DEVICE inline float unit_float(uint32_t bits) { return static_cast<float>(bits >> 8) * 0x1.0p-24f; }

/// A double in [0, 1) from 53 random bits.
MIXGRAD_HOST_DEVICE inline double unit_double(uint32_t hi, uint32_t lo) {
  return static_cast<double>((static_cast<uint64_t>(hi) << 21) ^ (lo >> 11)) * 0x1.0p-53;
}

}  // namespace mixgrad::kernels
