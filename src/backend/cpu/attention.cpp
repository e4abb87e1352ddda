// CPU flash attention. The forward walks blocks of kBlockQ queries against
// blocks of kBlockK keys (128 each: measured best of 64 / 128 here) with an
// online softmax (running maximum and sum per query, the output block
// rescaled as the maximum grows), all in the accumulation dtype; memory is
// the blocks, never [L, S]. Its scores are computed transposed (keys down,
// queries across), so key rows are read in place and each query's
// statistics are vertical vector operations. The backward works per
// (batch, key/value head): key blocks outside, query blocks inside, the
// probabilities recomputed from the saved log-sum-exp, dK and dV summed in
// per-task buffers (all query heads of a group land in the same ones), dQ in
// a per-head buffer. Tasks are independent, so results do not depend on the
// thread count.
//
// Each block product is tiles::gemm on vector types; the kernels are
// compiled per instruction set and picked by simd::level()
// (isa_variants.hpp). Where bfloat16 dot products beat float32 FMAs
// (simd::bf16_dot_products()), bfloat16's products of two input operands
// (the scores QK^T, forward and backward, and dP = dO V^T) run on
// vdpbf16ps instead (bf16_pairs.hpp): exact products, float sums. Those
// with a float operand (P V, dS K, P^T dO, dS^T Q) stay on float FMAs, so
// the probabilities and score gradients are never rounded to 16 bits.
#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <type_traits>
#include <vector>

#include <omp.h>

#include "backend/attention.hpp"
#include "backend/copy.hpp"
#include "backend/cpu/attention_tiles.hpp"
#include "backend/cpu/bf16_pairs.hpp"
#include "backend/cpu/isa_variants.hpp"
#include "core/simd.hpp"
#include "kernels/cast.hpp"

// The tiles pass GCC vector types between always-inlined functions and
// lambdas only; the ABI notes GCC gives for them (at the end of this file)
// do not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace mixgrad::backend::cpu {

namespace {

using kernels::cast;

constexpr int64_t kBlockQ = 128;
constexpr int64_t kBlockK = 128;
/// Causal blocks that straddle the diagonal are worked in strips of this
/// many rows (queries) or columns (keys): a strip computes only the part of
/// the block its queries can see.
constexpr int64_t kStrip = 32;

namespace bp = bf16_pairs;

template <class Acc>
constexpr Acc kNegInf = -std::numeric_limits<Acc>::infinity();

/// The geometry of one call, with typed pointers.
template <class T, class Acc>
struct Problem {
  const AttentionArgs& a;
  const T* q;
  const T* k;
  const T* v;
  int64_t group;  // query heads per key/value head

  explicit Problem(const AttentionArgs& args)
      : a(args), q(args.q.data<T>()), k(args.k.data<T>()), v(args.v.data<T>()), group(args.heads / args.kv_heads) {}
  const T* q_head(int64_t n, int64_t h) const { return q + n * a.q_layout.batch + h * a.q_layout.head; }
  const T* k_head(int64_t n, int64_t h) const { return k + n * a.k_layout.batch + (h / group) * a.k_layout.head; }
  const T* v_head(int64_t n, int64_t h) const { return v + n * a.v_layout.batch + (h / group) * a.v_layout.head; }
  /// Keys a query block [i0, i1) can see: all, or up to i1 when causal.
  int64_t key_end(int64_t i1) const { return a.causal ? std::min(a.kv_len, i1) : a.kv_len; }
};

/// Rows [i0, i1) of a head of `cols` columns, rows `row` elements apart,
/// converted to Acc, times `mul`, into dense rows.
template <class T, class Acc>
[[gnu::always_inline]] inline void load_rows(const T* src, int64_t row, int64_t i0, int64_t i1, int64_t cols, Acc mul,
                                             Acc* dst) {
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t c = 0; c < cols; ++c) dst[(i - i0) * cols + c] = cast<Acc>(src[i * row + c]) * mul;
}

/// Rows [i0, i1) of a head as Acc rows a product can read: the head itself
/// when T is Acc (no copy), else converted into `scratch`.
template <class Acc>
struct Rows {
  const Acc* at;
  int64_t ld;
  const Acc* row(int64_t i) const { return at + i * ld; }
};
template <class T, class Acc>
[[gnu::always_inline]] inline Rows<Acc> rows_of(const T* src, int64_t row, int64_t i0, int64_t i1, int64_t cols,
                                                Acc* scratch) {
  if constexpr (std::is_same_v<T, Acc>) {
    return {src + i0 * row, row};
  } else {
    load_rows(src, row, i0, i1, cols, Acc(1), scratch);
    return {scratch, cols};
  }
}

/// Rows [j0, j1) of such a head, transposed: dst[c * ld + (j - j0)]. float
/// heads go in 8 x 8 blocks transposed in registers, the edges one by one.
template <class T, class Acc>
[[gnu::always_inline]] inline void load_transposed(const T* src, int64_t row, int64_t j0, int64_t j1, int64_t cols,
                                                   int64_t ld, Acc* dst) {
  int64_t jb = j0, cb = 0;  // the rows and columns the blocks cover
  if constexpr (std::is_same_v<T, float> && std::is_same_v<Acc, float>) {
    cb = cols / 8 * 8;
    for (; jb + 8 <= j1; jb += 8)
      for (int64_t c = 0; c < cb; c += 8) tiles::transpose_8x8(src + jb * row + c, row, dst + c * ld + (jb - j0), ld);
    for (int64_t j = j0; j < jb; ++j)
      for (int64_t c = cb; c < cols; ++c) dst[c * ld + (j - j0)] = src[j * row + c];
  }
  for (int64_t j = jb; j < j1; ++j)
    for (int64_t c = 0; c < cols; ++c) dst[c * ld + (j - j0)] = cast<Acc>(src[j * row + c]);
}

/// The mask and the causal cut applied to a block of scores, queries
/// [i0, i0 + bq) by keys [j0, j0 + bk) of head (n, h), query i's score for
/// key j at s[i * qs + j * ks] (qs = ld, ks = 1 for a block of rows of
/// queries; the other way round for a block stored transposed).
template <class Acc>
[[gnu::always_inline]] inline void mask_block(const AttentionArgs& a, int64_t n, int64_t h, int64_t i0, int64_t bq,
                                              int64_t j0, int64_t bk, Acc* s, int64_t qs, int64_t ks) {
  if (a.mask_kind != AttentionMask::none) {
    const auto& st = a.mask_strides;
    const int64_t base = n * st[0] + h * st[1];
    for (int64_t i = 0; i < bq; ++i) {
      const int64_t row = base + (i0 + i) * st[2];
      Acc* si = s + i * qs;
      if (a.mask_kind == AttentionMask::keep) {
        const bool* m = a.mask.data<bool>() + row;
        for (int64_t j = 0; j < bk; ++j)
          if (!m[(j0 + j) * st[3]]) si[j * ks] = kNegInf<Acc>;
      } else {
        const Acc* m = a.mask.data<Acc>() + row;
        for (int64_t j = 0; j < bk; ++j) si[j * ks] += m[(j0 + j) * st[3]];
      }
    }
  }
  if (a.causal && j0 + bk > i0 + 1) {  // some key of the block lies after some query
    for (int64_t i = 0; i < bq; ++i)
      for (int64_t j = std::max<int64_t>(0, i0 + i + 1 - j0); j < bk; ++j) s[i * qs + j * ks] = kNegInf<Acc>;
  }
}

/// How many of key block [j0, j0 + bk)'s keys query rows [i0, i0 + rows)
/// can see: all without causal; else up to the last row's own position.
inline int64_t visible_keys(const AttentionArgs& a, int64_t i0, int64_t rows, int64_t j0, int64_t bk) {
  return a.causal ? std::clamp<int64_t>(i0 + rows - j0, 0, bk) : bk;
}

/// Which of query block [i0, i0 + bq)'s rows see key j0 + c: from the
/// returned row on (0 without causal).
inline int64_t first_seeing_row(const AttentionArgs& a, int64_t i0, int64_t bq, int64_t j0, int64_t c) {
  return a.causal ? std::clamp<int64_t>(j0 + c - i0, 0, bq) : 0;
}

/// Strips of `n` in `strip`s when `straddles`, else one: f(begin, end).
template <class F>
[[gnu::always_inline]] inline void strips(int64_t n, bool straddles, F&& f) {
  const int64_t step = straddles ? kStrip : n;
  for (int64_t b = 0; b < n; b += step) f(b, std::min(n, b + step));
}

/// Columns [kc, bk) of rows [r0, r1) of a block (rows kBlockK apart) set
/// to 0: nothing when the rows see the whole block.
template <class Acc>
inline void zero_columns(Acc* x, int64_t r0, int64_t r1, int64_t kc, int64_t bk) {
  if (kc < bk)
    for (int64_t i = r0; i < r1; ++i) std::fill(x + i * kBlockK + kc, x + i * kBlockK + bk, Acc(0));
}

/// Scratch of one thread in the forward: the query block transposed, a key
/// and value block (when converted), the scores transposed, the output
/// block and its softmax statistics.
template <class Acc>
struct ForwardScratch {
  std::vector<Acc> qt, k, v, st, o, m, l, alpha;
  std::vector<bp::Pair> qt_pairs, k_words;  // on pair products, in place of qt and k
  ForwardScratch(const AttentionArgs& a, bool pairs)
      : qt(pairs ? 0 : a.head_dim * kBlockQ), k(pairs ? 0 : kBlockK * a.head_dim), v(kBlockK * a.value_dim),
        st(kBlockK * kBlockQ),
        o(kBlockQ * a.value_dim), m(kBlockQ), l(kBlockQ), alpha(kBlockQ),
        qt_pairs(pairs ? bp::pairs(a.head_dim) * kBlockQ : 0), k_words(pairs ? kBlockK * bp::pairs(a.head_dim) : 0) {}
};

/// One query block [i0, i1) of head (n, h). The scores are computed
/// transposed, S^T = K (scale Q)^T with keys down and queries across: the
/// key rows are read as they are, the query block is transposed once for
/// all key blocks, and each query's softmax statistics run down a column.
/// With Pairs, S^T = scale (K Q^T) on bfloat16 pairs.
template <class T, class Acc, int Bytes, bool Pairs>
[[gnu::always_inline]] inline void forward_block(const Problem<T, Acc>& p, int64_t n, int64_t h, int64_t i0,
                                                 int64_t i1, ForwardScratch<Acc>& w, T* out, Acc* lse) {
  const AttentionArgs& a = p.a;
  const int64_t E = a.head_dim, Ev = a.value_dim, bq = i1 - i0, E2 = bp::pairs(E);
  const Acc scale = static_cast<Acc>(a.scale);
  if constexpr (Pairs) {
    bp::pack_transposed(p.q_head(n, h), a.q_layout.row, i0, i1, E, w.qt_pairs.data(), kBlockQ);
  } else {
    load_transposed(p.q_head(n, h), a.q_layout.row, i0, i1, E, kBlockQ, w.qt.data());
    for (int64_t e = 0; e < E; ++e) tiles::scale_row<Acc, Bytes>(bq, w.qt.data() + e * kBlockQ, scale);
  }
  std::fill(w.o.begin(), w.o.begin() + bq * Ev, Acc(0));
  std::fill(w.m.begin(), w.m.end(), kNegInf<Acc>);
  std::fill(w.l.begin(), w.l.end(), Acc(0));
  const T* kh = p.k_head(n, h);
  const T* vh = p.v_head(n, h);
  const int64_t kend = p.key_end(i1);
  for (int64_t j0 = 0; j0 < kend; j0 += kBlockK) {
    const int64_t bk = std::min(kBlockK, kend - j0);
    Rows<Acc> k{};
    if constexpr (Pairs)
      bp::pack_rows(kh, a.k_layout.row, j0, j0 + bk, E, w.k_words.data(), E2);
    else
      k = rows_of(kh, a.k_layout.row, j0, j0 + bk, E, w.k.data());
    const Rows<Acc> v = rows_of(vh, a.v_layout.row, j0, j0 + bk, Ev, w.v.data());
    // A block on the diagonal goes in strips of queries, each computing
    // only the keys its queries can see.
    strips(bq, a.causal && j0 + bk > i0 + 1, [&](int64_t r0, int64_t r1) __attribute__((always_inline)) {
      const int64_t kc = visible_keys(a, i0, r1, j0, bk);
      if (kc == 0) return;
      Acc* st = w.st.data() + r0;  // query r0 + c's score for key j at st[j * kBlockQ + c]
      if constexpr (Pairs) {
        bp::gemm<tiles::overwrite>(kc, r1 - r0, E2, w.k_words.data(), E2, 1, w.qt_pairs.data() + r0, kBlockQ, st,
                                   kBlockQ);
        for (int64_t j = 0; j < kc; ++j) tiles::scale_row<Acc, Bytes>(r1 - r0, st + j * kBlockQ, scale);
      } else {
        tiles::gemm<Acc, Bytes, tiles::overwrite>(kc, r1 - r0, E, k.at, k.ld, 1, w.qt.data() + r0, kBlockQ, st,
                                                  kBlockQ);
      }
      mask_block(a, n, h, i0 + r0, r1 - r0, j0, kc, st, 1, kBlockQ);
      tiles::softmax_columns<Acc, Bytes>(kc, r1 - r0, st, kBlockQ, w.m.data() + r0, w.l.data() + r0,
                                         w.alpha.data() + r0);
      for (int64_t i = r0; i < r1; ++i)
        if (w.alpha[i] != Acc(1)) tiles::scale_row<Acc, Bytes>(Ev, w.o.data() + i * Ev, w.alpha[i]);
      tiles::gemm<Acc, Bytes>(r1 - r0, Ev, kc, st, 1, kBlockQ, v.at, v.ld, w.o.data() + r0 * Ev, Ev);
    });
  }
  for (int64_t i = 0; i < bq; ++i) {
    const Acc l = w.l[i];
    const Acc inv = l > 0 ? Acc(1) / l : Acc(0);
    for (int64_t c = 0; c < Ev; ++c) out[(i0 + i) * Ev + c] = cast<T>(w.o[i * Ev + c] * inv);
    lse[i0 + i] = l > 0 ? w.m[i] + std::log(l) : kNegInf<Acc>;
  }
}

/// The forward's kernel (isa_variants.hpp): one query block.
template <class T, bool Pairs = false>
struct ForwardKernel {
  using Acc = kernels::compute_t<T>;
  template <int Bytes>
  [[gnu::always_inline]] void operator()(const Problem<T, Acc>& p, int64_t n, int64_t h, int64_t i0, int64_t i1,
                                         ForwardScratch<Acc>& w, T* out, Acc* lse) const {
    forward_block<T, Acc, Bytes, Pairs>(p, n, h, i0, i1, w, out, lse);
  }
};

/// The forward over every (n, h, query block), blocks handed out dynamically
/// (a causal block's cost grows with its position). The parallel region
/// calls the kernel's copy through a pointer: OpenMP outlines a region into
/// a function of its own, which would not inherit a target attribute.
template <class T, class Block>
void forward_tasks(const AttentionArgs& a, const AttentionOutputs& o, bool pairs, Block block) {
  using Acc = kernels::compute_t<T>;
  const Problem<T, Acc> p(a);
  T* out = writable<T>(o.out);
  Acc* lse = writable<Acc>(o.lse);
  const int64_t qblocks = (a.q_len + kBlockQ - 1) / kBlockQ;
  const int64_t tasks = a.n * a.heads * qblocks;
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), tasks));
#pragma omp parallel num_threads(threads)
  {
    ForwardScratch<Acc> w(a, pairs);
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t head = t / qblocks, qb = t % qblocks;
      const int64_t n = head / a.heads, h = head % a.heads;
      const int64_t i0 = qb * kBlockQ, i1 = std::min(a.q_len, i0 + kBlockQ);
      block({}, p, n, h, i0, i1, w, out + head * a.q_len * a.value_dim, lse + head * a.q_len);
    }
  }
}

/// The forward with the kernel's copy for this CPU: the level's, or the
/// AVX-512 one on pair products (which simd::bf16_dot_products() implies).
template <class T>
void forward_all(const AttentionArgs& a, const AttentionOutputs& o) {
  using Acc = kernels::compute_t<T>;
#if defined(__x86_64__) || defined(__i386__)
  if constexpr (std::is_same_v<T, bfloat16>)
    if (simd::bf16_dot_products())
      return forward_tasks<T>(a, o, true,
                              &isa::on_avx512<ForwardKernel<T, true>, const Problem<T, Acc>&, int64_t, int64_t,
                                              int64_t, int64_t, ForwardScratch<Acc>&, T*, Acc*>);
#endif
  forward_tasks<T>(a, o, false,
                   isa::variant<ForwardKernel<T>, const Problem<T, Acc>&, int64_t, int64_t, int64_t, int64_t,
                                ForwardScratch<Acc>&, T*, Acc*>());
}

/// Scratch of one backward task: one key/value head's dK and dV, one query
/// head's dQ and row terms, and the blocks. The [L, E]-sized sums live in
/// `sums`, this thread's part of a tensor from the library's allocator, so
/// they count in its peak and come from its cache on the next call.
template <class Acc>
struct BackwardScratch {
  std::span<Acc> dk, dv, dq;
  std::vector<Acc> d, q, dout, kt, kb, vt, s, dp;
  std::vector<bp::Pair> q_words, dout_words, kt_pairs, vt_pairs;  // on pair products, in place of kt and vt
  static int64_t sums_size(const AttentionArgs& a) {
    return a.kv_len * a.head_dim + a.kv_len * a.value_dim + a.q_len * a.head_dim;
  }
  BackwardScratch(const AttentionArgs& a, Acc* sums, bool pairs)
      : dk(sums, a.kv_len * a.head_dim), dv(dk.data() + dk.size(), a.kv_len * a.value_dim),
        dq(dv.data() + dv.size(), a.q_len * a.head_dim), d(a.q_len), q(kBlockQ * a.head_dim),
        dout(kBlockQ * a.value_dim), kt(pairs ? 0 : a.head_dim * kBlockK), kb(kBlockK * a.head_dim),
        vt(pairs ? 0 : a.value_dim * kBlockK), s(kBlockQ * kBlockK), dp(kBlockQ * kBlockK),
        q_words(pairs ? kBlockQ * bp::pairs(a.head_dim) : 0), dout_words(pairs ? kBlockQ * bp::pairs(a.value_dim) : 0),
        kt_pairs(pairs ? bp::pairs(a.head_dim) * kBlockK : 0), vt_pairs(pairs ? bp::pairs(a.value_dim) * kBlockK : 0) {}
};

/// One query block from i0 against the key block [j0, j0 + bk), whose K and
/// V are loaded in w (kb: its rows): S, P, dV += P^T dO, dP, dS, dQ and dK
/// of backward_head.
template <class T, class Acc, int Bytes, bool Pairs>
[[gnu::always_inline]] inline void backward_block(const Problem<T, Acc>& p, int64_t n, int64_t h, const Acc* lse,
                                                  const T* gout, BackwardScratch<Acc>& w, const Rows<Acc>& kb,
                                                  int64_t i0, int64_t j0, int64_t bk) {
  const AttentionArgs& a = p.a;
  const int64_t E = a.head_dim, Ev = a.value_dim, L = a.q_len;
  const int64_t E2 = bp::pairs(E), Ev2 = bp::pairs(Ev);
  const Acc scale = static_cast<Acc>(a.scale);
  const T* qh = p.q_head(n, h);
  Acc* dk = w.dk.data() + j0 * E;
  Acc* dv = w.dv.data() + j0 * Ev;
  const int64_t bq = std::min(kBlockQ, L - i0);
  load_rows(qh, a.q_layout.row, i0, i0 + bq, E, scale, w.q.data());
  const Rows<Acc> dout = rows_of(gout, Ev, i0, i0 + bq, Ev, w.dout.data());
  if constexpr (Pairs) {
    bp::pack_rows(qh, a.q_layout.row, i0, i0 + bq, E, w.q_words.data(), E2);
    bp::pack_rows(gout, Ev, i0, i0 + bq, Ev, w.dout_words.data(), Ev2);
  }
  Acc* s = w.s.data();
  Acc* dp = w.dp.data();
  // A block on the diagonal goes in strips: of query rows for the
  // products with a query side (S, dP, dQ), each over the keys its rows
  // see; of keys for those with a key side (dV, dK), each over the
  // queries that see them. A row strip sets the keys it does not see
  // to 0 in P and dS, which the key strips may read.
  const bool straddles = a.causal && j0 + bk > i0 + 1;
  strips(bq, straddles, [&](int64_t r0, int64_t r1) __attribute__((always_inline)) {
    const int64_t kc = visible_keys(a, i0, r1, j0, bk);
    zero_columns(s, r0, r1, kc, bk);
    if (kc == 0) return;
    Acc* sr = s + r0 * kBlockK;
    if constexpr (Pairs) {
      bp::gemm<tiles::overwrite>(r1 - r0, kc, E2, w.q_words.data() + r0 * E2, E2, 1, w.kt_pairs.data(), kBlockK,
                                 sr, kBlockK);
      for (int64_t i = r0; i < r1; ++i) tiles::scale_row<Acc, Bytes>(kc, s + i * kBlockK, scale);
    } else {
      tiles::gemm<Acc, Bytes, tiles::overwrite>(r1 - r0, kc, E, w.q.data() + r0 * E, E, 1, w.kt.data(), kBlockK,
                                                sr, kBlockK);
    }
    mask_block(a, n, h, i0 + r0, r1 - r0, j0, kc, sr, kBlockK, 1);
    // P = exp(S - lse); a row that saw no key has P = 0.
    for (int64_t i = r0; i < r1; ++i) {
      Acc* si = s + i * kBlockK;
      const Acc m = lse[i0 + i];
      if (m == kNegInf<Acc>) {
        std::fill(si, si + kc, Acc(0));
        continue;
      }
      tiles::exp_minus_sum<Acc, Bytes>(kc, si, m);
    }
  });
  // dV += P^T dO;  dP = dO V^T;  dS = P (dP - D);  dQ += dS K;  dK += dS^T (scale Q).
  strips(bk, straddles, [&](int64_t c0, int64_t c1) __attribute__((always_inline)) {
    const int64_t q0 = first_seeing_row(a, i0, bq, j0, c0);
    tiles::gemm<Acc, Bytes>(c1 - c0, Ev, bq - q0, s + q0 * kBlockK + c0, 1, kBlockK, dout.row(q0), dout.ld,
                            dv + c0 * Ev, Ev);
  });
  strips(bq, straddles, [&](int64_t r0, int64_t r1) __attribute__((always_inline)) {
    const int64_t kc = visible_keys(a, i0, r1, j0, bk);
    zero_columns(dp, r0, r1, kc, bk);
    if (kc == 0) return;
    Acc* dpr = dp + r0 * kBlockK;
    if constexpr (Pairs)
      bp::gemm<tiles::overwrite>(r1 - r0, kc, Ev2, w.dout_words.data() + r0 * Ev2, Ev2, 1, w.vt_pairs.data(),
                                 kBlockK, dpr, kBlockK);
    else
      tiles::gemm<Acc, Bytes, tiles::overwrite>(r1 - r0, kc, Ev, dout.row(r0), dout.ld, 1, w.vt.data(), kBlockK,
                                                dpr, kBlockK);
    for (int64_t i = r0; i < r1; ++i) {
      const Acc di = w.d[i0 + i];
      for (int64_t j = 0; j < kc; ++j) dp[i * kBlockK + j] = s[i * kBlockK + j] * (dp[i * kBlockK + j] - di);
    }
    tiles::gemm<Acc, Bytes>(r1 - r0, E, kc, dpr, kBlockK, 1, kb.at, kb.ld, w.dq.data() + (i0 + r0) * E, E);
  });
  strips(bk, straddles, [&](int64_t c0, int64_t c1) __attribute__((always_inline)) {
    const int64_t q0 = first_seeing_row(a, i0, bq, j0, c0);
    tiles::gemm<Acc, Bytes>(c1 - c0, E, bq - q0, dp + q0 * kBlockK + c0, 1, kBlockK, w.q.data() + q0 * E, E,
                            dk + c0 * E, E);
  });
}

/// Query head (n, h)'s contribution to its key/value head's dK and dV, and
/// its dQ. With Pairs, S = scale (Q K^T) and dP = dO V^T on bfloat16 pairs.
template <class T, class Acc, int Bytes, bool Pairs>
[[gnu::always_inline]] inline void backward_head(const Problem<T, Acc>& p, int64_t n, int64_t h, const T* out,
                                                 const Acc* lse, const T* gout, BackwardScratch<Acc>& w, T* dq_out) {
  const AttentionArgs& a = p.a;
  const int64_t E = a.head_dim, Ev = a.value_dim, L = a.q_len, S = a.kv_len;
  const Acc scale = static_cast<Acc>(a.scale);
  // D_i = sum_c dO[i, c] O[i, c]: the softmax backward's row term.
  for (int64_t i = 0; i < L; ++i) {
    Acc d = 0;
    for (int64_t c = 0; c < Ev; ++c) d += cast<Acc>(gout[i * Ev + c]) * cast<Acc>(out[i * Ev + c]);
    w.d[i] = d;
  }
  std::fill(w.dq.begin(), w.dq.end(), Acc(0));
  const T* kh = p.k_head(n, h);
  const T* vh = p.v_head(n, h);
  for (int64_t j0 = 0; j0 < S; j0 += kBlockK) {
    const int64_t bk = std::min(kBlockK, S - j0);
    if constexpr (Pairs) {
      bp::pack_transposed(kh, a.k_layout.row, j0, j0 + bk, E, w.kt_pairs.data(), kBlockK);
      bp::pack_transposed(vh, a.v_layout.row, j0, j0 + bk, Ev, w.vt_pairs.data(), kBlockK);
    } else {
      load_transposed(kh, a.k_layout.row, j0, j0 + bk, E, kBlockK, w.kt.data());
      load_transposed(vh, a.v_layout.row, j0, j0 + bk, Ev, kBlockK, w.vt.data());
    }
    const Rows<Acc> kb = rows_of(kh, a.k_layout.row, j0, j0 + bk, E, w.kb.data());
    // Causal: queries before j0 see none of these keys.
    for (int64_t i0 = a.causal ? (j0 / kBlockQ) * kBlockQ : 0; i0 < L; i0 += kBlockQ)
      backward_block<T, Acc, Bytes, Pairs>(p, n, h, lse, gout, w, kb, i0, j0, bk);
  }
  if (dq_out)
    for (int64_t i = 0; i < L * E; ++i) dq_out[i] = cast<T>(w.dq[i] * scale);
}

/// One backward task: key/value head hk of batch n, with every query head
/// of its group.
template <class T, class Acc, int Bytes, bool Pairs>
[[gnu::always_inline]] inline void backward_task(const Problem<T, Acc>& p, int64_t n, int64_t hk, const T* out,
                                                 const Acc* lse, const T* gout, BackwardScratch<Acc>& w, T* dq, T* dk,
                                                 T* dv) {
  const AttentionArgs& a = p.a;
  const int64_t L = a.q_len, S = a.kv_len, E = a.head_dim, Ev = a.value_dim;
  std::fill(w.dk.begin(), w.dk.end(), Acc(0));
  std::fill(w.dv.begin(), w.dv.end(), Acc(0));
  for (int64_t h = hk * p.group; h < (hk + 1) * p.group; ++h) {
    const int64_t head = n * a.heads + h;
    backward_head<T, Acc, Bytes, Pairs>(p, n, h, out + head * L * Ev, lse + head * L, gout + head * L * Ev, w,
                                 dq ? dq + head * L * E : nullptr);
  }
  const int64_t t = n * a.kv_heads + hk;
  if (dk)
    for (int64_t i = 0; i < S * E; ++i) dk[t * S * E + i] = cast<T>(w.dk[i]);
  if (dv)
    for (int64_t i = 0; i < S * Ev; ++i) dv[t * S * Ev + i] = cast<T>(w.dv[i]);
}

/// The backward's kernel (isa_variants.hpp): one key/value head.
template <class T, bool Pairs = false>
struct BackwardKernel {
  using Acc = kernels::compute_t<T>;
  template <int Bytes>
  [[gnu::always_inline]] void operator()(const Problem<T, Acc>& p, int64_t n, int64_t hk, const T* out,
                                         const Acc* lse, const T* gout, BackwardScratch<Acc>& w, T* dq, T* dk,
                                         T* dv) const {
    backward_task<T, Acc, Bytes, Pairs>(p, n, hk, out, lse, gout, w, dq, dk, dv);
  }
};

template <class T, class Task>
void backward_tasks(const AttentionArgs& a, const AttentionOutputs& saved, const Tensor& grad_out,
                    const AttentionGrads& g, bool pairs, Task task) {
  using Acc = kernels::compute_t<T>;
  const Problem<T, Acc> p(a);
  const T* out = saved.out.data<T>();
  const Acc* lse = saved.lse.data<Acc>();
  const T* gout = grad_out.data<T>();
  T* dq = g.q.defined() ? writable<T>(g.q) : nullptr;
  T* dk = g.k.defined() ? writable<T>(g.k) : nullptr;
  T* dv = g.v.defined() ? writable<T>(g.v) : nullptr;
  const int64_t tasks = a.n * a.kv_heads;
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), tasks));
  const int64_t per_thread = BackwardScratch<Acc>::sums_size(a);
  const Tensor sums = empty({threads, per_thread}, dtype_of<Acc>());
#pragma omp parallel num_threads(threads)
  {
    BackwardScratch<Acc> w(a, writable<Acc>(sums) + omp_get_thread_num() * per_thread, pairs);
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t)
      task({}, p, t / a.kv_heads, t % a.kv_heads, out, lse, gout, w, dq, dk, dv);
  }
}

/// The backward with the kernel's copy for this CPU, as forward_all picks it.
template <class T>
void backward_all(const AttentionArgs& a, const AttentionOutputs& saved, const Tensor& grad_out,
                  const AttentionGrads& g) {
  using Acc = kernels::compute_t<T>;
#if defined(__x86_64__) || defined(__i386__)
  if constexpr (std::is_same_v<T, bfloat16>)
    if (simd::bf16_dot_products())
      return backward_tasks<T>(a, saved, grad_out, g, true,
                               &isa::on_avx512<BackwardKernel<T, true>, const Problem<T, Acc>&, int64_t, int64_t,
                                               const T*, const Acc*, const T*, BackwardScratch<Acc>&, T*, T*, T*>);
#endif
  backward_tasks<T>(a, saved, grad_out, g, false,
                    isa::variant<BackwardKernel<T>, const Problem<T, Acc>&, int64_t, int64_t, const T*, const Acc*,
                                 const T*, BackwardScratch<Acc>&, T*, T*, T*>());
}

}  // namespace

bool attention_forward(const AttentionArgs& a, const AttentionOutputs& o) {
  if (o.out.numel() == 0) return true;
  visit_floating(a.q.dtype(), "scaled_dot_product_attention",
                 [&]<class T>() { forward_all<T>(a, o); });
  return true;
}

bool attention_backward(const AttentionArgs& a, const AttentionOutputs& saved, const Tensor& grad_out,
                        const AttentionGrads& grads) {
  // The kernel writes every element of the gradients it computes; only an
  // empty problem (no query or no key) leaves them to be zeroed here.
  if (a.n * a.heads * a.q_len * a.kv_len == 0) {
    for (const Tensor* t : {&grads.q, &grads.k, &grads.v})
      if (t->defined()) fill(*t, 0.0);
    return true;
  }
  visit_floating(a.q.dtype(), "scaled_dot_product_attention",
                 [&]<class T>() { backward_all<T>(a, saved, grad_out, grads); });
  return true;
}

}  // namespace mixgrad::backend::cpu

namespace mixgrad::backend {

MIXGRAD_CPU_KERNEL(attention_forward, cpu::attention_forward);
MIXGRAD_CPU_KERNEL(attention_backward, cpu::attention_backward);

}  // namespace mixgrad::backend
