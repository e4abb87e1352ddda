// The small dense pieces flash attention is made of, on GCC vector types so
// that every instruction-set variant (attention.cpp instantiates them inside
// functions marked MIXGRAD_AVX2_TARGET / MIXGRAD_AVX512_TARGET) gets full
// vector code from one source:
//
//   tiles::gemm<float, 64>(m, n, k, a, a_rs, a_cs, b, ldb, c, ldc);   // c += a b (a strided)
//   tiles::gemm<float, 64, tiles::overwrite>(...);                     // c = a b
//   tiles::exp_minus_sum<float, 64>(n, x, m);                         // x = exp(x - m), x <= m; their sum
//   tiles::transpose_8x8(src, src_row, dst, dst_row);                 // an 8 x 8 block of floats, transposed
//   tiles::softmax_columns<float, 64>(kc, nq, st, ld, m, l, alpha);   // online softmax down transposed scores
//
// Bytes is the vector width (16: SSE2, 32: AVX2, 64: AVX-512). Everything
// but gemm is always inlined into its caller, so it takes the caller's
// instruction set; gemm runs in its own copy for the width (see there).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "backend/cpu/isa_variants.hpp"
#include "backend/cpu/vector_exp.hpp"

// Vector types are passed between always-inlined functions only: the ABI
// note GCC gives for them does not apply.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace mixgrad::backend::cpu::tiles {

/// What a product does with c: adds to it, or replaces it (c is then only
/// written, so it need not be zeroed first).
enum Into : bool { overwrite = false, accumulate = true };

/// Rows [i0, i0 + MR) of c (+)= a b (see gemm): MR rows by two vectors of
/// columns held in registers across the whole sum, b streamed row by row.
template <class Acc, int Bytes, Into Mode, int MR>
[[gnu::always_inline]] inline void gemm_rows(int64_t i, int64_t n, int64_t k, const Acc* a, int64_t a_rs,
                                             int64_t a_cs, const Acc* b, int64_t ldb, Acc* c, int64_t ldc) {
  using V = typename Vec<Acc, Bytes>::type;
  constexpr int W = Vec<Acc, Bytes>::lanes, NR = 2 * W;
  int64_t j = 0;
  for (; j + NR <= n; j += NR) {
    V acc[MR][2];
    for (int r = 0; r < MR; ++r)
      for (int h = 0; h < 2; ++h) acc[r][h] = Mode == accumulate ? load<V>(c + (i + r) * ldc + j + h * W) : V{};
    for (int64_t p = 0; p < k; ++p) {
      const V b0 = load<V>(b + p * ldb + j), b1 = load<V>(b + p * ldb + j + W);
      for (int r = 0; r < MR; ++r) {
        const Acc ar = a[(i + r) * a_rs + p * a_cs];
        acc[r][0] += ar * b0;
        acc[r][1] += ar * b1;
      }
    }
    for (int r = 0; r < MR; ++r)
      for (int h = 0; h < 2; ++h) store(c + (i + r) * ldc + j + h * W, acc[r][h]);
  }
  for (; j + W <= n; j += W) {
    V acc[MR];
    for (int r = 0; r < MR; ++r) acc[r] = Mode == accumulate ? load<V>(c + (i + r) * ldc + j) : V{};
    for (int64_t p = 0; p < k; ++p) {
      const V b0 = load<V>(b + p * ldb + j);
      for (int r = 0; r < MR; ++r) acc[r] += a[(i + r) * a_rs + p * a_cs] * b0;
    }
    for (int r = 0; r < MR; ++r) store(c + (i + r) * ldc + j, acc[r]);
  }
  for (; j < n; ++j)
    for (int r = 0; r < MR; ++r) {
      Acc s = Mode == accumulate ? c[(i + r) * ldc + j] : Acc(0);
      for (int64_t p = 0; p < k; ++p) s += a[(i + r) * a_rs + p * a_cs] * b[p * ldb + j];
      c[(i + r) * ldc + j] = s;
    }
}

/// c[i * ldc + j] += sum_p a[i * a_rs + p * a_cs] * b[p * ldb + j] for i < m,
/// j < n (with `overwrite`, = instead of +=). Twelve rows at a time with
/// AVX-512's 32 registers (24 accumulators) and then eight (so a block of
/// 128 or a strip of 32 rows ends in one 8-row step, not two 4-row ones);
/// six with 16 registers; then four, then the rest one by one.
template <class Acc, int Bytes, Into Mode>
[[gnu::always_inline]] inline void gemm_body(int64_t m, int64_t n, int64_t k, const Acc* a, int64_t a_rs, int64_t a_cs,
                                        const Acc* b, int64_t ldb, Acc* c, int64_t ldc) {
  int64_t i = 0;
  if constexpr (Bytes >= 64) {
    for (; i + 12 <= m; i += 12) gemm_rows<Acc, Bytes, Mode, 12>(i, n, k, a, a_rs, a_cs, b, ldb, c, ldc);
    for (; i + 8 <= m; i += 8) gemm_rows<Acc, Bytes, Mode, 8>(i, n, k, a, a_rs, a_cs, b, ldb, c, ldc);
  } else {
    for (; i + 6 <= m; i += 6) gemm_rows<Acc, Bytes, Mode, 6>(i, n, k, a, a_rs, a_cs, b, ldb, c, ldc);
  }
  for (; i + 4 <= m; i += 4) gemm_rows<Acc, Bytes, Mode, 4>(i, n, k, a, a_rs, a_cs, b, ldb, c, ldc);
  for (; i < m; ++i) gemm_rows<Acc, Bytes, Mode, 1>(i, n, k, a, a_rs, a_cs, b, ldb, c, ldc);
}

/// gemm_body as a kernel of isa_variants.hpp.
template <class Acc, Into Mode>
struct GemmKernel {
  template <int Bytes>
  [[gnu::always_inline]] void operator()(int64_t m, int64_t n, int64_t k, const Acc* a, int64_t a_rs, int64_t a_cs,
                                         const Acc* b, int64_t ldb, Acc* c, int64_t ldc) const {
    gemm_body<Acc, Bytes, Mode>(m, n, k, a, a_rs, a_cs, b, ldb, c, ldc);
  }
};

/// gemm_body at vector width Bytes, in its own copy of the width's
/// instruction set (isa::on_width) rather than inlined: inlined into a
/// kernel, the 12-row step's 27 vector registers competed with the kernel's
/// live values, and GCC spilled a B vector to the stack in one of the
/// backward's products (perf: that product took 1.5 times as long as the
/// others of its size).
template <class Acc, int Bytes, Into Mode = accumulate>
[[gnu::always_inline]] inline void gemm(int64_t m, int64_t n, int64_t k, const Acc* a, int64_t a_rs, int64_t a_cs,
                                        const Acc* b, int64_t ldb, Acc* c, int64_t ldc) {
  isa::on_width<Bytes>(GemmKernel<Acc, Mode>{}, m, n, k, a, a_rs, a_cs, b, ldb, c, ldc);
}

/// dst[c * dst_row + r] = src[r * src_row + c] for r, c < 8: eight rows of
/// eight floats loaded as vectors and transposed in registers (the unpack /
/// shuffle / lane-swap sequence), instead of 64 scalar loads and stores.
[[gnu::always_inline]] inline void transpose_8x8(const float* src, int64_t src_row, float* dst, int64_t dst_row) {
  using V = Vec<float, 32>::type;
  V r[8];
  for (int k = 0; k < 8; ++k) r[k] = load<V>(src + k * src_row);
  V t[8], u[8];
  for (int k = 0; k < 8; k += 2) {  // pairs of rows interleaved within each half
    t[k] = __builtin_shufflevector(r[k], r[k + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[k + 1] = __builtin_shufflevector(r[k], r[k + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int k = 0; k < 8; k += 4) {  // four rows' columns (c, c + 4) gathered
    u[k] = __builtin_shufflevector(t[k], t[k + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    u[k + 1] = __builtin_shufflevector(t[k], t[k + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    u[k + 2] = __builtin_shufflevector(t[k + 1], t[k + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    u[k + 3] = __builtin_shufflevector(t[k + 1], t[k + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  for (int c = 0; c < 4; ++c) {  // rows 0-3 and 4-7 of columns c and c + 4 joined
    store(dst + c * dst_row, __builtin_shufflevector(u[c], u[c + 4], 0, 1, 2, 3, 8, 9, 10, 11));
    store(dst + (c + 4) * dst_row, __builtin_shufflevector(u[c], u[c + 4], 4, 5, 6, 7, 12, 13, 14, 15));
  }
}

/// The lanes of v combined by `op`, halving the vector each step.
template <class Acc, int Bytes, class Op>
[[gnu::always_inline]] inline Acc reduce_lanes(typename Vec<Acc, Bytes>::type v, Op op) {
  if constexpr (Bytes == sizeof(Acc)) {
    return v[0];
  } else {
    using H = typename Vec<Acc, Bytes / 2>::type;
    H lo, hi;
    std::memcpy(&lo, &v, sizeof lo);
    std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof lo, sizeof hi);
    return reduce_lanes<Acc, Bytes / 2>(op(lo, hi), op);
  }
}

/// x[j] = e^(x[j] - m) for j < n; returns their sum. float in one pass a
/// vector at a time, summed in two vectors of lanes; double through std::exp.
template <class Acc, int Bytes>
[[gnu::always_inline]] inline Acc exp_minus_sum(int64_t n, Acc* x, Acc m) {
  using V = typename Vec<Acc, Bytes>::type;
  constexpr int W = Vec<Acc, Bytes>::lanes;
  int64_t j = 0;
  if constexpr (std::is_same_v<Acc, float>) {
    const auto add = [](auto a, auto b) __attribute__((always_inline)) { return a + b; };
    const auto exp_at = [&](int64_t at) __attribute__((always_inline)) {
      const V e = exp_nonpositive<Bytes>(load<V>(x + at) - m);
      store(x + at, e);
      return e;
    };
    V acc0{}, acc1{};
    for (; j + 2 * W <= n; j += 2 * W) {
      acc0 += exp_at(j);
      acc1 += exp_at(j + W);
    }
    if (j + W <= n) {
      acc0 += exp_at(j);
      j += W;
    }
    Acc r = reduce_lanes<Acc, Bytes>(acc0 + acc1, add);
    for (; j < n; ++j) r += x[j] = kernels::exp_float_nonpositive(x[j] - m);
    return r;
  } else {
    Acc r = 0;
    for (; j < n; ++j) r += x[j] = std::exp(x[j] - m);
    return r;
  }
}

/// *p as X: a vector of lanes from p, or the element itself.
template <class X, class Acc>
[[gnu::always_inline]] inline X get(const Acc* p) {
  if constexpr (std::is_same_v<X, Acc>) return *p;
  else return load<X>(p);
}
template <class X, class Acc>
[[gnu::always_inline]] inline void put(Acc* p, X x) {
  if constexpr (std::is_same_v<X, Acc>) *p = x;
  else store(p, x);
}

/// softmax_columns on the columns X covers (one, or a vector of them).
template <class X, class Acc, class Exp>
[[gnu::always_inline]] inline void softmax_column_group(int64_t kc, Acc* st, int64_t ld, Acc* m, Acc* l, Acc* alpha,
                                                        Exp exp) {
  const auto max = [](X a, X b) __attribute__((always_inline)) { return b > a ? b : a; };
  const X m_old = get<X>(m);
  X mx[4] = {m_old, m_old, m_old, m_old};  // four chains: a max's latency is not paid per row
  int64_t j = 0;
  for (; j + 4 <= kc; j += 4)
    for (int u = 0; u < 4; ++u) mx[u] = max(mx[u], get<X>(st + (j + u) * ld));
  for (; j < kc; ++j) mx[0] = max(mx[0], get<X>(st + j * ld));
  const X m_new = max(max(mx[0], mx[1]), max(mx[2], mx[3]));
  const X neg_inf = X{} - std::numeric_limits<Acc>::infinity();
  const X sub = m_new == neg_inf ? X{} : m_new;  // a column that has seen nothing keeps P = 0
  X sum = X{};
  for (j = 0; j < kc; ++j) {
    const X e = exp(get<X>(st + j * ld) - sub);
    put(st + j * ld, e);
    sum += e;
  }
  const X a = exp(m_old - sub);
  put(alpha, a);
  put(l, get<X>(l) * a + sum);
  put(m, m_new);
}

/// One online-softmax step over a block of scores stored transposed,
/// st[j * ld + c] for keys j < kc and queries c < nq. Per query (column):
/// the running maximum m[c] and sum l[c] take in the block, the block
/// becomes e^(st - m[c]), and alpha[c] = e^(old m[c] - new m[c]) is what
/// the query's output so far must be multiplied by. float columns a vector
/// at a time, so every statistic is a vertical operation, none across lanes.
template <class Acc, int Bytes>
[[gnu::always_inline]] inline void softmax_columns(int64_t kc, int64_t nq, Acc* st, int64_t ld, Acc* m, Acc* l,
                                                   Acc* alpha) {
  int64_t c = 0;
  if constexpr (std::is_same_v<Acc, float>) {
    using V = typename Vec<float, Bytes>::type;
    constexpr int W = Vec<float, Bytes>::lanes;
    const auto exp = [](V x) __attribute__((always_inline)) { return exp_nonpositive<Bytes>(x); };
    for (; c + W <= nq; c += W) softmax_column_group<V>(kc, st + c, ld, m + c, l + c, alpha + c, exp);
    const auto exp1 = [](float x) __attribute__((always_inline)) { return kernels::exp_float_nonpositive(x); };
    for (; c < nq; ++c) softmax_column_group<float>(kc, st + c, ld, m + c, l + c, alpha + c, exp1);
  } else {
    const auto exp1 = [](Acc x) __attribute__((always_inline)) { return std::exp(x); };
    for (; c < nq; ++c) softmax_column_group<Acc>(kc, st + c, ld, m + c, l + c, alpha + c, exp1);
  }
}

/// x[j] *= a for j < n.
template <class Acc, int Bytes>
[[gnu::always_inline]] inline void scale_row(int64_t n, Acc* x, Acc a) {
  using V = typename Vec<Acc, Bytes>::type;
  constexpr int W = Vec<Acc, Bytes>::lanes;
  int64_t j = 0;
  for (; j + W <= n; j += W) store(x + j, load<V>(x + j) * a);
  for (; j < n; ++j) x[j] *= a;
}

}  // namespace mixgrad::backend::cpu::tiles

#pragma GCC diagnostic pop
