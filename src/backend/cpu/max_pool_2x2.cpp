// Branch-free loops over one output row at a time (two input rows), on the
// stored bits; on a channels-last pair, over each output pixel's C lanes
// (contiguous, so vectorised along C) from four input pixels: values compare through an integer order key, and the
// winner's bits are moved, so the output is the winning input exactly.
// Compiled portable, for AVX2 and with AVX-512 intrinsics, picked at run
// time (core/simd.hpp). Planes (image, channel) are split across threads.
#include "backend/cpu/max_pool_2x2.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include <immintrin.h>
#include <type_traits>

#include "backend/cpu/isa_variants.hpp"
#include "kernels/cast.hpp"
#include "kernels/loops.hpp"

#define MIXGRAD_ALWAYS_INLINE [[gnu::always_inline]] inline

namespace mixgrad::backend::cpu::max_pool_2x2 {

namespace {

template <size_t kBytes> struct bits_of;
template <> struct bits_of<2> { using type = uint16_t; };
template <> struct bits_of<4> { using type = uint32_t; };
template <> struct bits_of<8> { using type = uint64_t; };

// The geometry of an image plane; lanes: C for a channels-last pair (the
// kernels then walk output rows (image, oh)), 0 for NCHW (they walk planes).
struct Plane {
  int64_t h, w, oh, ow, lanes;
};

// An integer that orders floating-point values of type T (given as their
// bits) as their numeric values do: magnitude, negated for negative values,
// so -0 and +0 tie; NaN (any sign or payload) above everything, so the first
// NaN wins a window. Integer compares and selects vectorise where the
// NaN-aware float compare did not.
template <class T, class U, class S>
MIXGRAD_ALWAYS_INLINE S order_key(U u) {
  constexpr U kSign = U(1) << (8 * sizeof(U) - 1);
  constexpr U kInf = std::is_same_v<T, half>       ? U(0x7c00)
                     : std::is_same_v<T, bfloat16> ? U(0x7f80)
                     : std::is_same_v<T, float>    ? U(0x7f800000u)
                                                   : U(0x7ff0000000000000ull);
  const U mag = u & static_cast<U>(~kSign);
  const S k = (u & kSign) ? static_cast<S>(-static_cast<S>(mag)) : static_cast<S>(mag);
  return mag > kInf ? std::numeric_limits<S>::max() : k;
}

// The maximum of four candidates (their bits), ties to the first: the bits
// and the winner's index 0..3. Branch-free, so the loops around it vectorise.
template <class T, class U, class S>
MIXGRAD_ALWAYS_INLINE void best_of_4(const U (&c)[4], U& bits, S& index) {
  S best = order_key<T, U, S>(c[0]);
  bits = c[0];
  index = 0;
  for (int j = 1; j < 4; ++j) {
    const S k = order_key<T, U, S>(c[j]);
    const bool take = k > best;  // strict: ties go to the first
    best = take ? k : best;
    bits = take ? c[j] : bits;
    index = take ? S(j) : index;
  }
}

// Rows in plain loops: the portable variant, and float64 everywhere.
template <class T>
struct PlainRows {
  using U = typename bits_of<sizeof(T)>::type;
  using S = std::make_signed_t<U>;

  // One output row from input rows a, b, all in the integer domain of T's
  // bits. The pointers never overlap (restrict: no run-time overlap check).
  MIXGRAD_ALWAYS_INLINE static void forward_row(const T* ta, const T* tb, T* tout, uint8_t* __restrict win,
                                                int64_t ow) {
    const U* __restrict a = reinterpret_cast<const U*>(ta);
    const U* __restrict b = reinterpret_cast<const U*>(tb);
    U* __restrict out = reinterpret_cast<U*>(tout);
    for (int64_t i = 0; i < ow; ++i) {
      const U c[4] = {a[2 * i], a[2 * i + 1], b[2 * i], b[2 * i + 1]};
      S index;
      best_of_4<T, U, S>(c, out[i], index);
      win[i] = static_cast<uint8_t>(index);
    }
  }

  // Input-gradient row q of a window row: positions `first` (0 top, 2
  // bottom) and first + 1 get g where they won, zero elsewhere.
  MIXGRAD_ALWAYS_INLINE static void backward_row(const T* tg, const uint8_t* __restrict win, T* tq, int first,
                                                 int64_t ow) {
    const U* __restrict g = reinterpret_cast<const U*>(tg);
    U* __restrict q = reinterpret_cast<U*>(tq);
    for (int64_t i = 0; i < ow; ++i) {
      const U v = g[i];
      const int k = win[i];
      q[2 * i] = k == first ? v : U(0);
      q[2 * i + 1] = k == first + 1 ? v : U(0);
    }
  }
};

// Channels-last: output rows r = (image, oh) of ow pixels, each pixel's C
// lanes the lane-wise maximum of four input pixels. C is contiguous, so the
// lane loops vectorise at every instruction-set level (no AVX-512 rows
// needed); the comparison is best_of_4's, as on NCHW.
template <class T>
struct Pixels {
  using U = typename bits_of<sizeof(T)>::type;
  using S = std::make_signed_t<U>;

  // One output pixel's c lanes from input pixels p[0..3] (restrict
  // parameters: GCC vectorises the lane loops without alias checks).
  MIXGRAD_ALWAYS_INLINE static void forward_pixel(const U* __restrict p0, const U* __restrict p1,
                                                  const U* __restrict p2, const U* __restrict p3, U* __restrict out,
                                                  uint8_t* __restrict wn, int64_t c) {
    for (int64_t l = 0; l < c; ++l) {
      const U cand[4] = {p0[l], p1[l], p2[l], p3[l]};
      S index;
      best_of_4<T, U, S>(cand, out[l], index);
      wn[l] = static_cast<uint8_t>(index);
    }
  }

  // Input pixels q[0..3] of one window: g where each won, zero elsewhere
  // (all-ones or zero masks of U's width, not selects: GCC vectorises these).
  MIXGRAD_ALWAYS_INLINE static void backward_pixel(const U* __restrict g, const uint8_t* __restrict wn,
                                                   U* __restrict q0, U* __restrict q1, U* __restrict q2,
                                                   U* __restrict q3, int64_t c) {
    for (int64_t l = 0; l < c; ++l) {
      const U v = g[l];
      const unsigned k = wn[l];
      q0[l] = v & static_cast<U>(U(0) - U(k == 0));
      q1[l] = v & static_cast<U>(U(0) - U(k == 1));
      q2[l] = v & static_cast<U>(U(0) - U(k == 2));
      q3[l] = v & static_cast<U>(U(0) - U(k == 3));
    }
  }

  MIXGRAD_ALWAYS_INLINE static void forward(const T* x, T* y, uint8_t* win, const Plane& pl, int64_t c, int64_t r0,
                                            int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const U* a = reinterpret_cast<const U*>(x) + ((r / pl.oh) * pl.h + 2 * (r % pl.oh)) * pl.w * c;
      const U* b = a + pl.w * c;
      U* out = reinterpret_cast<U*>(y) + r * pl.ow * c;
      for (int64_t i = 0; i < pl.ow; ++i)
        forward_pixel(a + 2 * i * c, a + (2 * i + 1) * c, b + 2 * i * c, b + (2 * i + 1) * c, out + i * c,
                      win + (r * pl.ow + i) * c, c);
    }
  }

  MIXGRAD_ALWAYS_INLINE static void backward(const T* gy, const uint8_t* win, T* gx, const Plane& pl, int64_t c,
                                             int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t o = r % pl.oh, image = r / pl.oh;
      const U* g = reinterpret_cast<const U*>(gy) + r * pl.ow * c;
      U* q0 = reinterpret_cast<U*>(gx) + (image * pl.h + 2 * o) * pl.w * c;
      U* q1 = q0 + pl.w * c;
      for (int64_t i = 0; i < pl.ow; ++i)
        backward_pixel(g + i * c, win + (r * pl.ow + i) * c, q0 + 2 * i * c, q0 + (2 * i + 1) * c, q1 + 2 * i * c,
                       q1 + (2 * i + 1) * c, c);
      if (pl.w > 2 * pl.ow) {  // odd width: the last column is in no window
        std::memset(static_cast<void*>(q0 + (pl.w - 1) * c), 0, sizeof(T) * c);
        std::memset(static_cast<void*>(q1 + (pl.w - 1) * c), 0, sizeof(T) * c);
      }
      if (o == pl.oh - 1 && pl.h > 2 * pl.oh)  // odd height: the image's last row is in no window
        std::memset(static_cast<void*>(q1 + pl.w * c), 0, sizeof(T) * pl.w * c);
    }
  }
};

template <class T, class Rows>
struct Planes {
  MIXGRAD_ALWAYS_INLINE static void forward(const T* x, T* y, uint8_t* win, const Plane& pl, int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      for (int64_t o = 0; o < pl.oh; ++o) {
        const T* r0 = x + (p * pl.h + 2 * o) * pl.w;
        const int64_t at = (p * pl.oh + o) * pl.ow;
        Rows::forward_row(r0, r0 + pl.w, y + at, win + at, pl.ow);
      }
  }

  MIXGRAD_ALWAYS_INLINE static void backward(const T* gy, const uint8_t* win, T* gx, const Plane& pl, int64_t p0,
                                             int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      for (int64_t o = 0; o < pl.oh; ++o) {
        const int64_t at = (p * pl.oh + o) * pl.ow;
        T* q0 = gx + (p * pl.h + 2 * o) * pl.w;
        T* q1 = q0 + pl.w;
        Rows::backward_row(gy + at, win + at, q0, 0, pl.ow);
        Rows::backward_row(gy + at, win + at, q1, 2, pl.ow);
        if (pl.w > 2 * pl.ow) {  // odd width: the last column is in no window
          std::memset(static_cast<void*>(q0 + pl.w - 1), 0, sizeof(T));
          std::memset(static_cast<void*>(q1 + pl.w - 1), 0, sizeof(T));
        }
      }
      if (pl.h > 2 * pl.oh) std::memset(static_cast<void*>(gx + (p * pl.h + pl.h - 1) * pl.w), 0, sizeof(T) * pl.w);
    }
  }
};

#if defined(__x86_64__) || defined(__i386__)

// ---- AVX-512 rows ----------------------------------------------------------------
// GCC vectorises the loops above 32 or 64 outputs at a time and leaves rows
// shorter than that (14 or 7 outputs in the benchmark nets) to a scalar loop
// whose per-element branches mispredict on random data. These take 16
// outputs a step with masked loads and stores, whatever the row length.
// 16-bit values travel zero-extended in 32-bit lanes. GCC 12 warns in its
// own headers that the "undefined" register some intrinsics start from may
// be used uninitialised; it is not.
// (GCC only: clang has no -Wmaybe-uninitialized and warns of the unknown name.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define MIXGRAD_AVX512 __attribute__((target(MIXGRAD_AVX512_TARGET)))

MIXGRAD_AVX512 inline __mmask16 first16(int64_t n) {
  return static_cast<__mmask16>(_bzhi_u32(0xffffu, static_cast<unsigned>(std::clamp<int64_t>(n, 0, 16))));
}
MIXGRAD_AVX512 inline __mmask32 first32(int64_t n) {
  return static_cast<__mmask32>(_bzhi_u32(0xffffffffu, static_cast<unsigned>(std::clamp<int64_t>(n, 0, 32))));
}

// order_key on 16 lanes; kSign / kInf of the format (16- or 32-bit).
template <uint32_t kSign, uint32_t kInf>
MIXGRAD_AVX512 inline __m512i order_keys(__m512i u) {
  const __m512i mag = _mm512_and_si512(u, _mm512_set1_epi32(static_cast<int>(kSign - 1)));
  const __mmask16 neg = _mm512_test_epi32_mask(u, _mm512_set1_epi32(static_cast<int>(kSign)));
  const __m512i key = _mm512_mask_sub_epi32(mag, neg, _mm512_setzero_si512(), mag);
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(mag, _mm512_set1_epi32(static_cast<int>(kInf)));
  return _mm512_mask_mov_epi32(key, nan, _mm512_set1_epi32(std::numeric_limits<int32_t>::max()));
}

template <class T>
struct Avx512Rows {
  static constexpr bool k16 = sizeof(T) == 2;
  static constexpr uint32_t kSign = k16 ? 0x8000u : 0x80000000u;
  static constexpr uint32_t kInf = std::is_same_v<T, half> ? 0x7c00u : std::is_same_v<T, bfloat16> ? 0x7f80u : 0x7f800000u;

  // Elements 2i (even) and 2i + 1 (odd) of the 2n values at p, 16 lanes each.
  MIXGRAD_AVX512 static void pairs(const T* p, int64_t n, __m512i& even, __m512i& odd) {
    if constexpr (k16) {
      const __m512i v = _mm512_maskz_loadu_epi16(first32(2 * n), p);
      even = _mm512_and_si512(v, _mm512_set1_epi32(0xffff));
      odd = _mm512_srli_epi32(v, 16);
    } else {
      const __m512i lo = _mm512_maskz_loadu_epi32(first16(2 * n), p);
      const __m512i hi = _mm512_maskz_loadu_epi32(first16(2 * n - 16), reinterpret_cast<const uint32_t*>(p) + 16);
      const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
      even = _mm512_permutex2var_epi32(lo, ie, hi);
      odd = _mm512_permutex2var_epi32(lo, _mm512_add_epi32(ie, _mm512_set1_epi32(1)), hi);
    }
  }

  MIXGRAD_AVX512 static void forward_row(const T* a, const T* b, T* out, uint8_t* win, int64_t ow) {
    for (int64_t i = 0; i < ow; i += 16) {
      const int64_t n = std::min<int64_t>(16, ow - i);
      __m512i c[4];
      pairs(a + 2 * i, n, c[0], c[1]);
      pairs(b + 2 * i, n, c[2], c[3]);
      __m512i best = order_keys<kSign, kInf>(c[0]), bits = c[0], index = _mm512_setzero_si512();
      for (int j = 1; j < 4; ++j) {
        const __m512i k = order_keys<kSign, kInf>(c[j]);
        const __mmask16 take = _mm512_cmpgt_epi32_mask(k, best);  // strict: ties go to the first
        best = _mm512_mask_mov_epi32(best, take, k);
        bits = _mm512_mask_mov_epi32(bits, take, c[j]);
        index = _mm512_mask_mov_epi32(index, take, _mm512_set1_epi32(j));
      }
      const __mmask16 m = first16(n);
      if constexpr (k16) _mm256_mask_storeu_epi16(out + i, m, _mm512_cvtepi32_epi16(bits));
      else _mm512_mask_storeu_epi32(out + i, m, bits);
      _mm_mask_storeu_epi8(win + i, m, _mm512_cvtepi32_epi8(index));
    }
  }

  MIXGRAD_AVX512 static void backward_row(const T* g, const uint8_t* win, T* q, int first, int64_t ow) {
    for (int64_t i = 0; i < ow; i += 16) {
      const int64_t n = std::min<int64_t>(16, ow - i);
      const __mmask16 m = first16(n);
      const __m512i v = k16 ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, g + i))
                            : _mm512_maskz_loadu_epi32(m, g + i);
      const __m512i k = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, win + i));
      const __m512i e = _mm512_maskz_mov_epi32(_mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(first)), v);
      const __m512i o = _mm512_maskz_mov_epi32(_mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(first + 1)), v);
      if constexpr (k16) {
        _mm512_mask_storeu_epi16(q + 2 * i, first32(2 * n), _mm512_or_si512(e, _mm512_slli_epi32(o, 16)));
      } else {
        const __m512i il = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
        const __m512i ih = _mm512_add_epi32(il, _mm512_set1_epi32(8));
        _mm512_mask_storeu_epi32(q + 2 * i, first16(2 * n), _mm512_permutex2var_epi32(e, il, o));
        _mm512_mask_storeu_epi32(reinterpret_cast<uint32_t*>(q) + 2 * i + 16, first16(2 * n - 16),
                                 _mm512_permutex2var_epi32(e, ih, o));
      }
    }
  }
};

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif

// The rows of each instruction-set copy: GCC's vectorisation of the plain
// loops, and with AVX-512 the masked 16-lane rows above (not for float64).
template <class T, int Bytes>
struct RowsAt {
  using type = PlainRows<T>;
};
#if defined(__x86_64__) || defined(__i386__)
template <class T>
struct RowsAt<T, 64> {
  using type = std::conditional_t<sizeof(T) == 8, PlainRows<T>, Avx512Rows<T>>;
};
#endif

/// The kernels (isa_variants.hpp): units [p0, p1) (planes, or channels-last
/// output rows) forward and backward.
template <class T>
struct ForwardKernel {
  template <int Bytes>
  MIXGRAD_ALWAYS_INLINE void operator()(const T* x, T* y, uint8_t* win, const Plane& pl, int64_t p0, int64_t p1) const {
    if (pl.lanes > 0) Pixels<T>::forward(x, y, win, pl, pl.lanes, p0, p1);
    else Planes<T, typename RowsAt<T, Bytes>::type>::forward(x, y, win, pl, p0, p1);
  }
};
template <class T>
struct BackwardKernel {
  template <int Bytes>
  MIXGRAD_ALWAYS_INLINE void operator()(const T* gy, const uint8_t* win, T* gx, const Plane& pl, int64_t p0,
                                        int64_t p1) const {
    if (pl.lanes > 0) Pixels<T>::backward(gy, win, gx, pl, pl.lanes, p0, p1);
    else Planes<T, typename RowsAt<T, Bytes>::type>::backward(gy, win, gx, pl, p0, p1);
  }
};

// x, y (or gx, gy) both contiguous, or both channels-last: then either is
// not contiguous (with C == 1 or H * W == 1 the two layouts are one memory).
Plane plane_of(const Tensor& x, const Tensor& y) {
  const bool cl = !x.is_contiguous() || !y.is_contiguous();
  return {x.shape()[2], x.shape()[3], y.shape()[2], y.shape()[3], cl ? x.shape()[1] : 0};
}

// The units the threads split: planes, or channels-last output rows.
int64_t units(const Tensor& x, const Plane& pl) {
  return pl.lanes > 0 ? x.shape()[0] * pl.oh : x.shape()[0] * x.shape()[1];
}

int64_t unit_grain(const Plane& pl) {
  const int64_t unit = pl.lanes > 0 ? 2 * pl.w * pl.lanes : pl.h * pl.w;
  return std::max<int64_t>(1, kernels::kParallelGrain / std::max<int64_t>(1, unit));
}

}  // namespace

bool applies(const Pool2dParams& p) {
  return p.kernel.h == 2 && p.kernel.w == 2 && p.stride.h == 2 && p.stride.w == 2 && p.padding.h == 0 &&
         p.padding.w == 0;
}

void forward(const Tensor& x, const Tensor& y, const Tensor& winners) {
  const Plane pl = plane_of(x, y);
  const int64_t n = units(x, pl);
  auto* win = static_cast<uint8_t*>(winners.raw_data());
  visit_floating(x.dtype(), "max_pool2d", [&]<class T>() {
    const auto fn = isa::variant<ForwardKernel<T>, const T*, T*, uint8_t*, const Plane&, int64_t, int64_t>();
    const T* xp = static_cast<const T*>(x.raw_data());
    T* yp = static_cast<T*>(y.raw_data());
    kernels::parallel_for(n, unit_grain(pl), [&](int64_t p0, int64_t p1) { fn({}, xp, yp, win, pl, p0, p1); });
  });
}

void backward(const Tensor& gy, const Tensor& winners, const Tensor& gx) {
  const Plane pl = plane_of(gx, gy);
  const int64_t n = units(gx, pl);
  const auto* win = static_cast<const uint8_t*>(winners.raw_data());
  visit_floating(gx.dtype(), "max_pool2d", [&]<class T>() {
    const auto fn = isa::variant<BackwardKernel<T>, const T*, const uint8_t*, T*, const Plane&, int64_t, int64_t>();
    const T* gp = static_cast<const T*>(gy.raw_data());
    T* out = static_cast<T*>(gx.raw_data());
    kernels::parallel_for(n, unit_grain(pl), [&](int64_t p0, int64_t p1) { fn({}, gp, win, out, pl, p0, p1); });
  });
}

}  // namespace mixgrad::backend::cpu::max_pool_2x2
