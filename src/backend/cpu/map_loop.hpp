// The CPU elementwise engine: out[i] = fn(in_0[i], ..., in_{N-1}[i]) over
// broadcast, strided inputs, for any functor from kernels/*.hpp.
//
//   map<float, float, 2>(out, {Operand(a), Operand(b)}, kernels::Mul<float>{});
//
// Inputs are read as T and computed in C = compute_t<T>; the functor's
// result R is stored as O. The loop runs over the innermost runs that
// for_each_run produces (dimensions merged, threads for large tensors) and
// picks per run:
//  - all contiguous (and no float16 operand): one loop over the elements,
//    bfloat16 converted inline as it is read and written, compiled twice:
//    portable and inside an AVX-512 target function picked at run time
//    (core/simd.hpp), where bfloat16 loops vectorise 16 lanes wide;
//  - two inputs, one a broadcast scalar (stride 0), T == C and O == R: the
//    scalar is hoisted;
//  - otherwise blocks of kMapBlock elements: each input is gathered (or, for
//    float16 / bfloat16, bulk-converted with mixgrad::convert) into a float
//    buffer, the functor runs over contiguous buffers, the result is written
//    back (bulk-converted for 16-bit outputs). Contiguous inputs that need no
//    conversion are read in place.
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "backend/copy.hpp"
#include "backend/elementwise.hpp"
#include "backend/cpu/isa_variants.hpp"
#include "kernels/cast.hpp"
#include "kernels/loops.hpp"

namespace mixgrad::backend::cpu::detail {

inline constexpr int64_t kMapBlock = 256;

template <class T>
inline constexpr bool is_16bit_float = std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

/// Byte strides of `t` read in the iteration shape `shape` (NumPy
/// broadcasting): 0 along broadcast and missing leading dimensions.
inline Shape broadcast_byte_strides(const Tensor& t, const Shape& shape) {
  Shape s;
  const int lead = shape.ndim() - t.ndim();
  const int64_t es = element_size(t.dtype());
  for (int i = 0; i < shape.ndim(); ++i) {
    const int j = i - lead;
    s.push_back(j < 0 || t.shape()[j] == 1 ? 0 : t.strides()[j] * es);
  }
  return s;
}

/// A run of n elements of T at p (byte stride) as contiguous C values:
/// in place when possible, else converted into buf.
template <class T, class C>
const C* load_block(const char* p, int64_t stride, int64_t n, C* buf) {
  if (stride == 0) {
    const C v = kernels::cast<C>(*reinterpret_cast<const T*>(p));
    for (int64_t i = 0; i < n; ++i) buf[i] = v;
    return buf;
  }
  if (stride == static_cast<int64_t>(sizeof(T))) {
    if constexpr (std::is_same_v<T, C>) {
      return reinterpret_cast<const C*>(p);
    } else if constexpr (is_16bit_float<T> && std::is_same_v<C, float>) {
      convert(reinterpret_cast<const T*>(p), buf, n);
      return buf;
    } else {
      const T* s = reinterpret_cast<const T*>(p);
      for (int64_t i = 0; i < n; ++i) buf[i] = kernels::cast<C>(s[i]);
      return buf;
    }
  }
  for (int64_t i = 0; i < n; ++i) buf[i] = kernels::cast<C>(*reinterpret_cast<const T*>(p + i * stride));
  return buf;
}

/// Writes n contiguous R values to a run of O at p (byte stride).
template <class O, class R>
void store_block(const R* src, char* p, int64_t stride, int64_t n) {
  if (stride == static_cast<int64_t>(sizeof(O))) {
    if constexpr (is_16bit_float<O> && std::is_same_v<R, float>) {
      convert(src, reinterpret_cast<O*>(p), n);
    } else {
      O* d = reinterpret_cast<O*>(p);
      for (int64_t i = 0; i < n; ++i) d[i] = kernels::cast<O>(src[i]);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) *reinterpret_cast<O*>(p + i * stride) = kernels::cast<O>(src[i]);
}

template <class C, size_t>
using Repeat = C;

/// An element of T read as C; bfloat16 by its bits (vectorises).
template <class T, class C>
[[gnu::always_inline]] inline C read_as(const T& v) {
  if constexpr (std::is_same_v<T, bfloat16> && std::is_same_v<C, float>) {
    return ::mixgrad::detail::bfloat16_bits_to_float(v.bits);
  } else {
    return kernels::cast<C>(v);
  }
}

/// A result R stored as O; float -> bfloat16 by the rounding of half.hpp.
template <class O, class R>
[[gnu::always_inline]] inline void write_as(O& o, R r) {
  if constexpr (std::is_same_v<O, bfloat16> && std::is_same_v<R, float>) {
    o.bits = ::mixgrad::detail::float_to_bfloat16_bits(r);
  } else {
    o = kernels::cast<O>(r);
  }
}

template <class T, class O, class Fn, class Seq>
struct MapRun;

template <class T, class O, class Fn, size_t... I>
struct MapRun<T, O, Fn, std::index_sequence<I...>> {
  static constexpr int N = sizeof...(I);
  using C = kernels::compute_t<T>;
  using R = std::invoke_result_t<const Fn&, Repeat<C, I>...>;
  static constexpr bool kDirect = std::is_same_v<T, C> && std::is_same_v<O, R>;
  static constexpr int64_t kT = sizeof(T);
  static constexpr int64_t kO = sizeof(O);

  Fn fn;

  // No `omp simd` here: forcing it around a libm call (exp, erf) makes the
  // compiler pack and unpack every lane, several times slower than the plain
  // loop; arithmetic and select functors vectorise without it.
  static void compute(const Fn& fn, R* o, const std::array<const C*, N>& x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) o[i] = fn(x[I][i]...);
  }

  // Contiguous operands read and written in place; float16 (whose scalar
  // conversion has branches) takes the blocks below instead.
  static constexpr bool kInline = !std::is_same_v<T, half> && !std::is_same_v<O, half>;

  [[gnu::always_inline]] static void contiguous(const Fn& fn, O* o, const std::array<const T*, N>& x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) write_as<O, R>(o[i], fn(read_as<T, C>(x[I][i])...));
  }
  // `contiguous` as a kernel of isa_variants.hpp: compiled at each level.
  struct Contiguous {
    template <int Bytes>
    [[gnu::always_inline]] void operator()(const Fn& fn, O* o, const std::array<const T*, N>& x, int64_t n) const {
      contiguous(fn, o, x, n);
    }
  };

  void operator()(std::array<char*, N + 1> p, const std::array<int64_t, N + 1>& st, int64_t n) const {
    const bool all_contiguous = st[0] == kO && ((st[I + 1] == kT) && ...);
    if constexpr (kInline) {
      if (all_contiguous) {
        O* o = reinterpret_cast<O*>(p[0]);
        const std::array<const T*, N> x{reinterpret_cast<const T*>(p[I + 1])...};
        return isa::variant<Contiguous, const Fn&, O*, const std::array<const T*, N>&, int64_t>()({}, fn, o, x, n);
      }
    }
    if constexpr (kDirect) {
      if constexpr (N == 2) {  // tensor with a broadcast scalar on either side
        if (st[0] == kO) {
          R* o = reinterpret_cast<R*>(p[0]);
          if (st[1] == kT && st[2] == 0) {
            const C* a = reinterpret_cast<const C*>(p[1]);
            const C b = *reinterpret_cast<const C*>(p[2]);
            for (int64_t i = 0; i < n; ++i) o[i] = fn(a[i], b);
            return;
          }
          if (st[1] == 0 && st[2] == kT) {
            const C a = *reinterpret_cast<const C*>(p[1]);
            const C* b = reinterpret_cast<const C*>(p[2]);
            for (int64_t i = 0; i < n; ++i) o[i] = fn(a, b[i]);
            return;
          }
        }
      }
    }
    alignas(64) C buf[N > 0 ? N : 1][kMapBlock];
    alignas(64) R obuf[kMapBlock];
    for (int64_t b0 = 0; b0 < n; b0 += kMapBlock) {
      const int64_t len = std::min(kMapBlock, n - b0);
      const std::array<const C*, N> src{load_block<T, C>(p[I + 1] + b0 * st[I + 1], st[I + 1], len, buf[I])...};
      char* dst = p[0] + b0 * st[0];
      if constexpr (std::is_same_v<O, R>) {
        if (st[0] == kO) {
          compute(fn, reinterpret_cast<R*>(dst), src, len);
          continue;
        }
      }
      compute(fn, obuf, src, len);
      store_block<O, R>(obuf, dst, st[0], len);
    }
  }
};

/// out[i] = fn(inputs[0][i], ...) with broadcasting. Tensor inputs hold T,
/// out holds O; scalar inputs are converted to T first (so they round like
/// the tensor's elements).
template <class T, class O, int N, class Fn>
void map(const Tensor& out, const std::array<Operand, N>& inputs, const Fn& fn) {
  std::array<Shape, N + 1> strides;
  std::array<char*, N + 1> base;
  std::array<T, N> scalars{};
  strides[0] = byte_strides(out);
  base[0] = static_cast<char*>(out.raw_data());
  for (int k = 0; k < N; ++k) {
    if (inputs[k].tensor) {
      strides[k + 1] = broadcast_byte_strides(*inputs[k].tensor, out.shape());
      base[k + 1] = static_cast<char*>(inputs[k].tensor->raw_data());
    } else {
      scalars[k] = kernels::cast<T>(inputs[k].scalar);
      Shape zero = out.shape();
      for (int d = 0; d < zero.ndim(); ++d) zero[d] = 0;
      strides[k + 1] = zero;
      base[k + 1] = reinterpret_cast<char*>(&scalars[k]);
    }
  }
  Shape shape = out.shape();  // walked in out's memory order: channels-last operands run contiguous
  kernels::permute_to_walk_order<N + 1>(shape, strides);
  kernels::for_each_run<N + 1>(shape, strides, base, MapRun<T, O, Fn, std::make_index_sequence<N>>{fn});
}

}  // namespace mixgrad::backend::cpu::detail
