// GCC vector types, and e^x for x <= 0 written on them, for the CPU kernels
// that build one source at several instruction sets (the attention tiles,
// the cross-entropy rows): each instantiates these inside its functions
// marked MIXGRAD_AVX2_TARGET / MIXGRAD_AVX512_TARGET, where they inline.
//
//   using V = tiles::Vec<float, 32>::type;            // 8 floats
//   V e = tiles::exp_nonpositive<32>(x);              // e^x lane by lane, x <= 0
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/fast_float.hpp"

// Vector types are passed between always-inlined functions only: the ABI
// note GCC gives for them does not apply.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace mixgrad::backend::cpu::tiles {

template <class Acc, int Bytes>
struct Vec {
  typedef Acc type __attribute__((vector_size(Bytes)));
  static constexpr int lanes = Bytes / static_cast<int>(sizeof(Acc));
};

template <class V>
[[gnu::always_inline]] inline V load(const void* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V>
[[gnu::always_inline]] inline void store(void* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

/// e^x lane by lane, every x <= 0 (or NaN): kernels::exp_float_nonpositive
/// on a vector (its kernels::exp_reduced, then the same scaling and
/// selects), because GCC leaves that function's loop scalar at AVX2 width
/// (its selects and float-to-int conversion vectorise only with AVX-512's masks).
template <int Bytes>
[[gnu::always_inline]] inline typename Vec<float, Bytes>::type exp_nonpositive(typename Vec<float, Bytes>::type x) {
  using V = typename Vec<float, Bytes>::type;
  typedef int32_t VI __attribute__((vector_size(Bytes)));
  const V lo = V{} - 87.f;
  const V xc = x >= lo ? x : lo;  // NaN too: no NaN reaches the integer conversion
  V n, y;
  kernels::exp_reduced(xc, n, y);
  const VI e = (__builtin_convertvector(n, VI) + 127) << 23;
  V scale;
  std::memcpy(&scale, &e, sizeof scale);
  const V r = x < lo ? V{} : y * scale;
  return x != x ? x : r;
}

/// The same in place on memory.
template <int Bytes>
[[gnu::always_inline]] inline void exp_nonpositive(float* at) {
  store(at, exp_nonpositive<Bytes>(load<typename Vec<float, Bytes>::type>(at)));
}

}  // namespace mixgrad::backend::cpu::tiles

#pragma GCC diagnostic pop
