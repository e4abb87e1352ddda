// CPU batch normalization: mixgrad's own kernels for every floating dtype,
// and the running-statistics update.
//
// oneDNN is not used here. oneDNN 2.6's batch normalization for plain NCHW
// data (ncsp_bnorm) is not JIT-compiled: forward + backward on the benchmark
// models' shapes, one thread, it took 3-10x longer than these kernels in
// float32 and 8-45x longer in bfloat16, so it never ran outside tests.
//
// Speed. Each channel is N rows of S contiguous values, rows C * S apart.
// Rows are read in blocks of kBlock values; 16-bit blocks are converted to
// float in bulk (mixgrad::convert) first. Sums use kLanes independent
// accumulators, element i of a block going to lane i % kLanes: the loops
// over lanes vectorise without reassociating floating-point sums (no
// -ffast-math), and the result does not depend on the vector width. Every
// loop is compiled twice, portable and inside an AVX-512 target function,
// picked at run time (core/simd.hpp); both give the same bits.
//
// One thread takes a channel from start to end where the channels share out
// evenly: the forward reads the channel once for the statistics and again,
// from cache, to normalise it; the backward likewise for its two sums and
// the input gradient. With few channels each channel's rows are also cut
// into parts: a first parallel pass computes per-part statistics (sums),
// combined per channel in a fixed order, and a second pass applies them.
//
// Numerics. The statistics take one pass over memory. Lanes accumulate
// x - k and (x - k)^2 with a shift k near the channel's mean (the mean of the
// part's first block), and are flushed into double every kFlush values, so
// the float sums stay short. Var = E[(x-k)^2] - E[x-k]^2 cancels only as
// much as k is off the mean; if a part's shift turns out further than 8
// standard deviations from its mean (a first block unlike the rest), the
// part is summed again about the mean just found. Parts combine with the
// pairwise formula for (count, mean, M2). Normalisation and gradients use
// x - mean, not x * scale + (bias - mean * scale), which would cancel for
// data far from zero.
#include "backend/cpu/batch_norm.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/isa_variants.hpp"
#include "kernels/cast.hpp"
#include "kernels/loops.hpp"

#define MIXGRAD_ALWAYS_INLINE [[gnu::always_inline]] inline

namespace mixgrad::backend::cpu {

int64_t batch_norm_parts(int64_t n, int64_t units, int threads) {
  if (threads <= 1 || n <= 1 || units <= 0) return 1;
  // Whole units per thread when they share out evenly or there are so many
  // that the last thread's extra one costs little.
  if (units % threads == 0 || units >= 8 * threads) return 1;
  const int64_t want = (8 * static_cast<int64_t>(threads) + units - 1) / units;
  return std::min(n, want);
}

namespace {

constexpr int kLanes = 32;
constexpr int64_t kBlock = 512;
constexpr int64_t kFlush = 4096;

struct Geometry {
  int64_t n, c, s;
  int64_t row(int64_t ni, int64_t ci) const { return (ni * c + ci) * s; }
};

Geometry geometry(const Tensor& x) {
  const int64_t n = x.shape()[0], c = x.shape()[1];
  return {n, c, n * c == 0 ? 0 : x.numel() / (n * c)};
}

// Rows [begin, end) of part p of n rows cut into `parts`.
struct Rows {
  int64_t begin, end;
};
Rows rows_of(int64_t part, int64_t parts, int64_t n) { return {part * n / parts, (part + 1) * n / parts}; }

// Count, mean and sum of squared deviations of a set of values.
struct Moments {
  double count = 0, mean = 0, m2 = 0;
};

// Pairwise combination (exact up to rounding, whatever the two means).
Moments combine(const Moments& a, const Moments& b) {
  if (a.count == 0) return b;
  if (b.count == 0) return a;
  const double n = a.count + b.count, d = b.mean - a.mean;
  return {n, a.mean + d * (b.count / n), a.m2 + b.m2 + d * d * (a.count * b.count / n)};
}

// Σ gy and Σ gy (x - mean) of a channel or a part of one.
struct GradSums {
  double dy = 0, dy_xc = 0;
};

// ---- block loops (inlined into both instruction-set variants) ---------------------

template <class A>
struct Lanes {
  A v[kLanes];
};

template <class A>
MIXGRAD_ALWAYS_INLINE Lanes<A> zero_lanes() {
  Lanes<A> l;
  for (int i = 0; i < kLanes; ++i) l.v[i] = A(0);
  return l;
}

// Sum of the lanes, in a fixed tree order, in double.
template <class A>
MIXGRAD_ALWAYS_INLINE double reduce(const Lanes<A>& l) {
  double t[kLanes];
  for (int i = 0; i < kLanes; ++i) t[i] = static_cast<double>(l.v[i]);
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int i = 0; i < w; ++i) t[i] += t[i + w];
  return t[0];
}

// Values of T read as A: bfloat16 converts inline (a shift), so the loops
// that read it vectorise with the conversion folded in; float16 is
// converted a block at a time into a buffer first (mixgrad::convert).
template <class T, class A>
struct In {
  const T* p;
  MIXGRAD_ALWAYS_INLINE A operator[](int64_t i) const {
    if constexpr (std::is_same_v<T, bfloat16>) return detail::bfloat16_bits_to_float(p[i].bits);
    else return static_cast<A>(p[i]);
  }
};

template <class T, class A>
MIXGRAD_ALWAYS_INLINE auto in_block(const T* p, int64_t n, A* buf) {
  if constexpr (std::is_same_v<T, half>) {
    convert(p, buf, n);
    return In<A, A>{buf};
  } else {
    return In<T, A>{p};
  }
}

// dst[i] = value(i) for i < n, rounded to T (bfloat16 inline, float16
// through buf and mixgrad::convert).
template <class T, class A, class F>
MIXGRAD_ALWAYS_INLINE void write_block(T* dst, int64_t n, A* buf, F&& value) {
  if constexpr (std::is_same_v<T, half>) {
    for (int64_t i = 0; i < n; ++i) buf[i] = value(i);
    convert(buf, dst, n);
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    for (int64_t i = 0; i < n; ++i) dst[i].bits = detail::float_to_bfloat16_bits(value(i));
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = value(i);
  }
}

// The lane loop: f(lane, element, valid) over elements [0, n), element i in
// lane i % kLanes, in full vectors of kLanes; the last partial vector runs
// all lanes with `valid` false past n (no reads there: masked, not scalar,
// so the lanes stay in registers).
template <class F>
MIXGRAD_ALWAYS_INLINE void for_lanes(int64_t n, F&& f) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) f(l, i + l, true);
  const int64_t rest = n - i;
  if (rest > 0)
    for (int l = 0; l < kLanes; ++l) f(l, i + l, l < rest);
}

template <class V, class A>
MIXGRAD_ALWAYS_INLINE void add_sum(const V& x, int64_t n, Lanes<A>& s) {
  Lanes<A> a = s;
  for_lanes(n, [&](int l, int64_t i, bool valid) { a.v[l] += valid ? x[i] : A(0); });
  s = a;
}

template <class V, class A>
MIXGRAD_ALWAYS_INLINE void add_shifted(const V& x, int64_t n, A k, Lanes<A>& s1, Lanes<A>& s2) {
  Lanes<A> a = s1, b = s2;
  for_lanes(n, [&](int l, int64_t i, bool valid) {
    const A d = valid ? x[i] - k : A(0);
    a.v[l] += d;
    b.v[l] += d * d;
  });
  s1 = a;
  s2 = b;
}

template <class V, class A>
MIXGRAD_ALWAYS_INLINE void add_grad(const V& x, const V& g, int64_t n, A m, Lanes<A>& s1, Lanes<A>& s2) {
  Lanes<A> a = s1, b = s2;
  for_lanes(n, [&](int l, int64_t i, bool valid) {
    const A gv = valid ? g[i] : A(0);
    const A xc = valid ? x[i] - m : A(0);
    a.v[l] += gv;
    b.v[l] += gv * xc;
  });
  s1 = a;
  s2 = b;
}

// Two lane sums flushed into double every kFlush values.
template <class A>
struct PairSum {
  Lanes<A> a = zero_lanes<A>(), b = zero_lanes<A>();
  double ta = 0, tb = 0;
  int64_t pending = 0;
  // After a block of n values. A block shorter than kLanes still adds a value
  // to every lane, so it counts as kLanes: between flushes no lane sums
  // more than kFlush / kLanes values, whatever the row length.
  MIXGRAD_ALWAYS_INLINE void counted(int64_t n) {
    pending += (n + kLanes - 1) / kLanes * kLanes;
    if (pending >= kFlush) flush();
  }
  MIXGRAD_ALWAYS_INLINE void flush() {
    ta += reduce(a);
    tb += reduce(b);
    a = zero_lanes<A>();
    b = zero_lanes<A>();
    pending = 0;
  }
};

// ---- per-part work ---------------------------------------------------------------

template <class T, class A>
MIXGRAD_ALWAYS_INLINE Moments shifted_moments(const T* x, const Geometry& g, int64_t c, Rows r, A k) {
  alignas(64) A buf[kBlock];
  PairSum<A> s;
  for (int64_t n = r.begin; n < r.end; ++n)
    for (int64_t b0 = 0; b0 < g.s; b0 += kBlock) {
      const int64_t len = std::min(kBlock, g.s - b0);
      add_shifted(in_block<T, A>(x + g.row(n, c) + b0, len, buf), len, k, s.a, s.b);
      s.counted(len);
    }
  s.flush();
  const double count = static_cast<double>((r.end - r.begin) * g.s);
  const double d = s.ta / count;
  return {count, static_cast<double>(k) + d, std::max(0.0, s.tb - s.ta * d)};
}

template <class T, class A>
MIXGRAD_ALWAYS_INLINE Moments part_moments(const T* x, const Geometry& g, int64_t c, Rows r) {
  if (r.begin == r.end || g.s == 0) return {};
  alignas(64) A buf[kBlock];
  const int64_t len = std::min(kBlock, g.s);
  Lanes<A> s = zero_lanes<A>();
  add_sum(in_block<T, A>(x + g.row(r.begin, c), len, buf), len, s);
  const A k = static_cast<A>(reduce(s) / static_cast<double>(len));
  Moments m = shifted_moments<T, A>(x, g, c, r, k);
  const double off = m.mean - static_cast<double>(k);
  if (off * off > 64.0 * (m.m2 / m.count)) m = shifted_moments<T, A>(x, g, c, r, static_cast<A>(m.mean));
  return m;
}

// y = (x - mean) * scale + shift over the rows of a part.
template <class T, class A>
MIXGRAD_ALWAYS_INLINE void normalize(const T* x, T* y, const Geometry& g, int64_t c, Rows r, A m, A scale, A shift) {
  alignas(64) A in[kBlock];
  alignas(64) A out[kBlock];
  for (int64_t n = r.begin; n < r.end; ++n)
    for (int64_t b0 = 0; b0 < g.s; b0 += kBlock) {
      const int64_t len = std::min(kBlock, g.s - b0);
      const int64_t at = g.row(n, c) + b0;
      const auto xv = in_block<T, A>(x + at, len, in);
      write_block<T, A>(y + at, len, out, [&](int64_t i) { return (xv[i] - m) * scale + shift; });
    }
}

template <class T, class A>
MIXGRAD_ALWAYS_INLINE GradSums grad_sums(const T* x, const T* gy, const Geometry& g, int64_t c, Rows r, A m) {
  alignas(64) A xb[kBlock];
  alignas(64) A gb[kBlock];
  PairSum<A> s;
  for (int64_t n = r.begin; n < r.end; ++n)
    for (int64_t b0 = 0; b0 < g.s; b0 += kBlock) {
      const int64_t len = std::min(kBlock, g.s - b0);
      const int64_t at = g.row(n, c) + b0;
      add_grad(in_block<T, A>(x + at, len, xb), in_block<T, A>(gy + at, len, gb), len, m, s.a, s.b);
      s.counted(len);
    }
  s.flush();
  return {s.ta, s.tb};
}

// gx = alpha * gy + beta * (x - mean) + gamma over the rows of a part.
struct GradCoefficients {
  double alpha, beta, gamma;
};

template <class T, class A>
MIXGRAD_ALWAYS_INLINE void grad_input(const T* x, const T* gy, T* gx, const Geometry& g, int64_t c, Rows r, A m,
                                      const GradCoefficients& k) {
  alignas(64) A xb[kBlock];
  alignas(64) A gb[kBlock];
  alignas(64) A out[kBlock];
  const A alpha = static_cast<A>(k.alpha), beta = static_cast<A>(k.beta), gamma = static_cast<A>(k.gamma);
  const bool scale_only = beta == A(0) && gamma == A(0);
  for (int64_t n = r.begin; n < r.end; ++n)
    for (int64_t b0 = 0; b0 < g.s; b0 += kBlock) {
      const int64_t len = std::min(kBlock, g.s - b0);
      const int64_t at = g.row(n, c) + b0;
      const auto gv = in_block<T, A>(gy + at, len, gb);
      if (scale_only) {
        write_block<T, A>(gx + at, len, out, [&](int64_t i) { return alpha * gv[i]; });
      } else {
        const auto xv = in_block<T, A>(x + at, len, xb);
        write_block<T, A>(gx + at, len, out,
                          [&](int64_t i) { return alpha * gv[i] + beta * (xv[i] - m) + gamma; });
      }
    }
}

// ---- one value per (image, channel): S == 1 -----------------------------------------
// [N, C] input (BatchNorm1d): a channel's values are C apart, so the loops
// run along a row over a block of channels instead, with per-channel
// accumulators in arrays, flushed into double every kRowFlush rows. Same
// shifted statistics (the shift: the part's first row) and the same
// re-summing when a shift lies far off its channel's mean.

constexpr int64_t kChannelBlock = 256;
constexpr int64_t kRowFlush = 128;

// Channels [c0, c0 + w) of unit u (a block of channels).
struct Columns {
  int64_t c0, w;
};
Columns columns_of(int64_t unit, int64_t c) {
  const int64_t c0 = unit * kChannelBlock;
  return {c0, std::min(kChannelBlock, c - c0)};
}

template <class T, class A>
MIXGRAD_ALWAYS_INLINE void column_moments_about(const T* x, const Geometry& g, Columns cols, Rows r, const A* k,
                                                Moments* out) {
  alignas(64) A s1[kChannelBlock], s2[kChannelBlock], buf[kChannelBlock];
  double t1[kChannelBlock], t2[kChannelBlock];
  for (int64_t j = 0; j < cols.w; ++j) t1[j] = t2[j] = 0.0;
  for (int64_t n0 = r.begin; n0 < r.end; n0 += kRowFlush) {
    for (int64_t j = 0; j < cols.w; ++j) s1[j] = s2[j] = A(0);
    for (int64_t n = n0; n < std::min(r.end, n0 + kRowFlush); ++n) {
      const auto v = in_block<T, A>(x + n * g.c + cols.c0, cols.w, buf);
      for (int64_t j = 0; j < cols.w; ++j) {
        const A d = v[j] - k[j];
        s1[j] += d;
        s2[j] += d * d;
      }
    }
    for (int64_t j = 0; j < cols.w; ++j) {
      t1[j] += static_cast<double>(s1[j]);
      t2[j] += static_cast<double>(s2[j]);
    }
  }
  const double count = static_cast<double>(r.end - r.begin);
  for (int64_t j = 0; j < cols.w; ++j) {
    const double d = t1[j] / count;
    out[j] = {count, static_cast<double>(k[j]) + d, std::max(0.0, t2[j] - t1[j] * d)};
  }
}

// Moments of each channel of a block over the rows of a part.
template <class T, class A>
MIXGRAD_ALWAYS_INLINE void column_moments(const T* x, const Geometry& g, Columns cols, Rows r, Moments* out) {
  if (r.begin == r.end) {
    for (int64_t j = 0; j < cols.w; ++j) out[j] = {};
    return;
  }
  alignas(64) A k[kChannelBlock], buf[kChannelBlock];
  const auto first = in_block<T, A>(x + r.begin * g.c + cols.c0, cols.w, buf);
  for (int64_t j = 0; j < cols.w; ++j) k[j] = first[j];
  column_moments_about<T, A>(x, g, cols, r, k, out);
  bool again = false;
  for (int64_t j = 0; j < cols.w; ++j) {
    const double off = out[j].mean - static_cast<double>(k[j]);
    again = again || off * off > 64.0 * (out[j].m2 / out[j].count);
    k[j] = static_cast<A>(out[j].mean);
  }
  if (again) column_moments_about<T, A>(x, g, cols, r, k, out);
}

// y = (x - mean) * scale + shift per channel of a block, over a part's rows.
template <class T, class A>
MIXGRAD_ALWAYS_INLINE void column_normalize(const T* x, T* y, const Geometry& g, Columns cols, Rows r, const A* m,
                                            const A* scale, const A* shift) {
  alignas(64) A in[kChannelBlock], out[kChannelBlock];
  for (int64_t n = r.begin; n < r.end; ++n) {
    const int64_t at = n * g.c + cols.c0;
    const auto xv = in_block<T, A>(x + at, cols.w, in);
    write_block<T, A>(y + at, cols.w, out, [&](int64_t j) { return (xv[j] - m[j]) * scale[j] + shift[j]; });
  }
}

template <class T, class A>
MIXGRAD_ALWAYS_INLINE void column_grad_sums(const T* x, const T* gy, const Geometry& g, Columns cols, Rows r,
                                            const A* m, GradSums* out) {
  alignas(64) A s1[kChannelBlock], s2[kChannelBlock], xb[kChannelBlock], gb[kChannelBlock];
  double t1[kChannelBlock], t2[kChannelBlock];
  for (int64_t j = 0; j < cols.w; ++j) t1[j] = t2[j] = 0.0;
  for (int64_t n0 = r.begin; n0 < r.end; n0 += kRowFlush) {
    for (int64_t j = 0; j < cols.w; ++j) s1[j] = s2[j] = A(0);
    for (int64_t n = n0; n < std::min(r.end, n0 + kRowFlush); ++n) {
      const int64_t at = n * g.c + cols.c0;
      const auto xv = in_block<T, A>(x + at, cols.w, xb);
      const auto gv = in_block<T, A>(gy + at, cols.w, gb);
      for (int64_t j = 0; j < cols.w; ++j) {
        s1[j] += gv[j];
        s2[j] += gv[j] * (xv[j] - m[j]);
      }
    }
    for (int64_t j = 0; j < cols.w; ++j) {
      t1[j] += static_cast<double>(s1[j]);
      t2[j] += static_cast<double>(s2[j]);
    }
  }
  for (int64_t j = 0; j < cols.w; ++j) out[j] = {t1[j], t2[j]};
}

template <class T, class A>
MIXGRAD_ALWAYS_INLINE void column_grad_input(const T* x, const T* gy, T* gx, const Geometry& g, Columns cols, Rows r,
                                             const A* m, const GradCoefficients* k) {
  alignas(64) A alpha[kChannelBlock], beta[kChannelBlock], gamma[kChannelBlock];
  alignas(64) A xb[kChannelBlock], gb[kChannelBlock], out[kChannelBlock];
  for (int64_t j = 0; j < cols.w; ++j) {
    alpha[j] = static_cast<A>(k[j].alpha);
    beta[j] = static_cast<A>(k[j].beta);
    gamma[j] = static_cast<A>(k[j].gamma);
  }
  for (int64_t n = r.begin; n < r.end; ++n) {
    const int64_t at = n * g.c + cols.c0;
    const auto xv = in_block<T, A>(x + at, cols.w, xb);
    const auto gv = in_block<T, A>(gy + at, cols.w, gb);
    write_block<T, A>(gx + at, cols.w, out,
                      [&](int64_t j) { return alpha[j] * gv[j] + beta[j] * (xv[j] - m[j]) + gamma[j]; });
  }
}

// ---- forward -----------------------------------------------------------------------

template <class T, class S>
struct Forward {
  using A = kernels::compute_t<T>;
  const T* x;
  T* y;
  S* mean;
  S* var;
  const S* w;
  const S* b;
  Geometry g;
  double eps;
  int64_t parts;
  Moments* partial;  // [C * parts], two-pass training only

  // The channel's statistics as stored, and its normalisation.
  MIXGRAD_ALWAYS_INLINE void store_stats(int64_t c, const Moments& m) const {
    mean[c] = static_cast<S>(m.count > 0 ? m.mean : 0.0);
    var[c] = static_cast<S>(m.count > 0 ? m.m2 / m.count : 0.0);
  }
  MIXGRAD_ALWAYS_INLINE void apply(int64_t c, Rows r) const {
    const double rstd = 1.0 / std::sqrt(static_cast<double>(var[c]) + eps);
    const double scale = (w ? static_cast<double>(w[c]) : 1.0) * rstd;
    const double shift = b ? static_cast<double>(b[c]) : 0.0;
    normalize<T, A>(x, y, g, c, r, static_cast<A>(mean[c]), static_cast<A>(scale), static_cast<A>(shift));
  }
  // Items [i0, i1) of one of the passes: item i is part i % parts of unit
  // i / parts (a channel; a block of channels when S == 1).
  MIXGRAD_ALWAYS_INLINE void run(int pass, int64_t i0, int64_t i1) const {
    if (g.s == 1) return run_columns(pass, i0, i1);
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t c = i / parts;
      const Rows r = rows_of(i % parts, parts, g.n);
      if (pass == 0) {  // whole channels: statistics, then normalise while the data is in cache
        store_stats(c, part_moments<T, A>(x, g, c, r));
        apply(c, r);
      } else if (pass == 1) {
        partial[i] = part_moments<T, A>(x, g, c, r);
      } else {
        apply(c, r);
      }
    }
  }
  MIXGRAD_ALWAYS_INLINE void apply_columns(Columns cols, Rows r) const {
    alignas(64) A m[kChannelBlock], scale[kChannelBlock], shift[kChannelBlock];
    for (int64_t j = 0; j < cols.w; ++j) {
      const int64_t c = cols.c0 + j;
      const double rstd = 1.0 / std::sqrt(static_cast<double>(var[c]) + eps);
      m[j] = static_cast<A>(mean[c]);
      scale[j] = static_cast<A>((w ? static_cast<double>(w[c]) : 1.0) * rstd);
      shift[j] = static_cast<A>(b ? static_cast<double>(b[c]) : 0.0);
    }
    column_normalize<T, A>(x, y, g, cols, r, m, scale, shift);
  }
  MIXGRAD_ALWAYS_INLINE void run_columns(int pass, int64_t i0, int64_t i1) const {
    Moments m[kChannelBlock];
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t part = i % parts;
      const Columns cols = columns_of(i / parts, g.c);
      const Rows r = rows_of(part, parts, g.n);
      if (pass == 0) {
        column_moments<T, A>(x, g, cols, r, m);
        for (int64_t j = 0; j < cols.w; ++j) store_stats(cols.c0 + j, m[j]);
        apply_columns(cols, r);
      } else if (pass == 1) {
        column_moments<T, A>(x, g, cols, r, m);
        for (int64_t j = 0; j < cols.w; ++j) partial[(cols.c0 + j) * parts + part] = m[j];
      } else {
        apply_columns(cols, r);
      }
    }
  }
};

// Units the work is cut into before parts of the batch: channels, or blocks
// of kChannelBlock channels when S == 1.
int64_t units_of(const Geometry& g) { return g.s == 1 ? (g.c + kChannelBlock - 1) / kChannelBlock : g.c; }

// Threads worth using: one below the library's parallel grain.
int threads_for(const Geometry& g) {
  return g.n * g.c * g.s < kernels::kParallelGrain ? 1 : omp_get_max_threads();
}

/// The passes of a Forward or Backward job: its copy for simd::level()
/// (isa_variants.hpp) and its split into parts (which it sets in the job)
/// and items.
template <class Job>
struct Passes {
  isa::Copy<isa::RunJob, const Job&, int, int64_t, int64_t> fn =
      isa::variant<isa::RunJob, const Job&, int, int64_t, int64_t>();
  int64_t items = 0;
  bool parallel = false;

  explicit Passes(Job& job) {
    const int threads = threads_for(job.g);
    const int64_t units = units_of(job.g);
    job.parts = batch_norm_parts(job.g.n, units, threads);
    items = units * job.parts;
    parallel = threads > 1;
  }
  void run(const Job& job, int pass) const {
    kernels::parallel_for(items, parallel ? 1 : items + 1,
                          [&](int64_t i0, int64_t i1) { fn(isa::RunJob{}, job, pass, i0, i1); });
  }
};

template <class T, class S>
void forward(const BatchNormForward& a) {
  Forward<T, S> f{static_cast<const T*>(a.x.raw_data()),
                  static_cast<T*>(a.y.raw_data()),
                  static_cast<S*>(a.mean.raw_data()),
                  static_cast<S*>(a.var.raw_data()),
                  a.weight.defined() ? static_cast<const S*>(a.weight.raw_data()) : nullptr,
                  a.bias.defined() ? static_cast<const S*>(a.bias.raw_data()) : nullptr,
                  geometry(a.x),
                  a.eps,
                  1,
                  nullptr};
  const Geometry& g = f.g;
  if (g.c == 0) return;
  const Passes<Forward<T, S>> passes(f);
  if (!a.training) return passes.run(f, 2);
  if (f.parts == 1) return passes.run(f, 0);
  std::vector<Moments> partial(static_cast<size_t>(g.c * f.parts));
  f.partial = partial.data();
  passes.run(f, 1);
  for (int64_t c = 0; c < g.c; ++c) {
    Moments m;
    for (int64_t p = 0; p < f.parts; ++p) m = combine(m, partial[c * f.parts + p]);
    f.store_stats(c, m);
  }
  passes.run(f, 2);
}

// ---- backward ----------------------------------------------------------------------

template <class T, class S>
struct Backward {
  using A = kernels::compute_t<T>;
  const T* x;
  const T* gy;
  T* gx;
  const S* mean;
  const S* var;
  const S* w;
  S* gw;
  S* gb;
  Geometry g;
  double eps;
  bool training;
  bool need_sums;
  int64_t parts;
  GradSums* partial;             // [C * parts], two-pass only
  const GradCoefficients* coef;  // [C], two-pass only

  MIXGRAD_ALWAYS_INLINE double rstd(int64_t c) const { return 1.0 / std::sqrt(static_cast<double>(var[c]) + eps); }

  // Parameter gradients from the channel's sums; the input-gradient coefficients.
  MIXGRAD_ALWAYS_INLINE GradCoefficients finish(int64_t c, const GradSums& s) const {
    const double rs = rstd(c);
    if (gw) gw[c] = static_cast<S>(w ? s.dy_xc * rs : 0.0);
    if (gb) gb[c] = static_cast<S>(s.dy);
    const double scale = (w ? static_cast<double>(w[c]) : 1.0) * rs;
    const double count = static_cast<double>(g.n * g.s);
    if (!training || count == 0) return {scale, 0.0, 0.0};
    // The batch statistics depend on x: remove the gradient's mean and its
    // projection on x̂ = (x - mean) * rstd.
    return {scale, -scale * rs * rs * (s.dy_xc / count), -scale * (s.dy / count)};
  }
  MIXGRAD_ALWAYS_INLINE GradSums sums(int64_t c, Rows r) const {
    return grad_sums<T, A>(x, gy, g, c, r, static_cast<A>(mean[c]));
  }
  MIXGRAD_ALWAYS_INLINE void input(int64_t c, Rows r, const GradCoefficients& k) const {
    grad_input<T, A>(x, gy, gx, g, c, r, static_cast<A>(mean[c]), k);
  }
  MIXGRAD_ALWAYS_INLINE void run_columns(int pass, int64_t i0, int64_t i1) const {
    alignas(64) A m[kChannelBlock];
    GradSums sums_of[kChannelBlock];
    GradCoefficients k[kChannelBlock];
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t part = i % parts;
      const Columns cols = columns_of(i / parts, g.c);
      const Rows r = rows_of(part, parts, g.n);
      for (int64_t j = 0; j < cols.w; ++j) m[j] = static_cast<A>(mean[cols.c0 + j]);
      if (pass == 0) {
        if (need_sums) column_grad_sums<T, A>(x, gy, g, cols, r, m, sums_of);
        for (int64_t j = 0; j < cols.w; ++j) k[j] = finish(cols.c0 + j, need_sums ? sums_of[j] : GradSums{});
        if (gx) column_grad_input<T, A>(x, gy, gx, g, cols, r, m, k);
      } else if (pass == 1) {
        column_grad_sums<T, A>(x, gy, g, cols, r, m, sums_of);
        for (int64_t j = 0; j < cols.w; ++j) partial[(cols.c0 + j) * parts + part] = sums_of[j];
      } else {
        column_grad_input<T, A>(x, gy, gx, g, cols, r, m, coef + cols.c0);
      }
    }
  }
  MIXGRAD_ALWAYS_INLINE void run(int pass, int64_t i0, int64_t i1) const {
    if (g.s == 1) return run_columns(pass, i0, i1);
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t c = i / parts;
      const Rows r = rows_of(i % parts, parts, g.n);
      if (pass == 0) {  // whole channels: sums, then the input gradient while the data is in cache
        const GradCoefficients k = finish(c, need_sums ? sums(c, r) : GradSums{});
        if (gx) input(c, r, k);
      } else if (pass == 1) {
        partial[i] = sums(c, r);
      } else {
        input(c, r, coef[c]);
      }
    }
  }
};

template <class T, class S>
void backward(const BatchNormBackward& a) {
  Backward<T, S> k{static_cast<const T*>(a.x.raw_data()),
                   static_cast<const T*>(a.grad_y.raw_data()),
                   a.grad_x.defined() ? static_cast<T*>(a.grad_x.raw_data()) : nullptr,
                   static_cast<const S*>(a.mean.raw_data()),
                   static_cast<const S*>(a.var.raw_data()),
                   a.weight.defined() ? static_cast<const S*>(a.weight.raw_data()) : nullptr,
                   a.grad_weight.defined() ? static_cast<S*>(a.grad_weight.raw_data()) : nullptr,
                   a.grad_bias.defined() ? static_cast<S*>(a.grad_bias.raw_data()) : nullptr,
                   geometry(a.x),
                   a.eps,
                   a.training,
                   false,
                   1,
                   nullptr,
                   nullptr};
  const Geometry& g = k.g;
  if (g.c == 0) return;
  k.need_sums = (a.training && k.gx) || k.gw || k.gb;
  const Passes<Backward<T, S>> passes(k);
  if (k.parts == 1) return passes.run(k, 0);
  std::vector<GradSums> partial(static_cast<size_t>(g.c * k.parts));
  if (k.need_sums) {
    k.partial = partial.data();
    passes.run(k, 1);
  }
  // Each channel's parts summed in order; the parameter gradients and the
  // input-gradient coefficients, once per channel.
  std::vector<GradCoefficients> coef(static_cast<size_t>(g.c));
  for (int64_t c = 0; c < g.c; ++c) {
    GradSums total;
    for (int64_t p = 0; p < k.parts; ++p) {
      total.dy += partial[c * k.parts + p].dy;
      total.dy_xc += partial[c * k.parts + p].dy_xc;
    }
    coef[c] = k.finish(c, total);
  }
  k.coef = coef.data();
  if (k.gx) passes.run(k, 2);
}

template <class F>
void visit_stats(DType x, DType stats, F&& f) {
  visit_floating(x, "batch_norm", [&]<class T>() {
    if (stats == DType::float64) f.template operator()<T, double>();
    else f.template operator()<T, float>();
  });
}

// The forward and the backward for the statistics dtype of x's dtype
// (backend/batch_norm.hpp): float64 for float64, float32 for the others;
// the op passes no other. One instantiation per input dtype, not two.
template <class F>
void visit_input(DType x, DType stats, F&& f) {
  visit_floating(x, "batch_norm", [&]<class T>() {
    using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
    if (stats != dtype_of<S>())
      throw DTypeError("batch_norm: statistics in " + std::string(to_string(stats)) + " for input " +
                       std::string(to_string(x)) + "; expected " + std::string(to_string(dtype_of<S>())));
    f.template operator()<T, S>();
  });
}

// running = (1 - momentum) * running + momentum * correction * batch, with
// the arithmetic in double and the result rounded to the statistics dtype S
// before it is stored in the running dtype R (any floating dtype, any
// stride): what a copy to S, the update, and a copy back would give.
template <class R, class S>
void update_running(const Tensor& running, const Tensor& batch, double momentum, double correction) {
  R* r = static_cast<R*>(running.raw_data());
  const S* b = static_cast<const S*>(batch.raw_data());
  const int64_t stride = running.strides()[0];
  for (int64_t c = 0; c < running.numel(); ++c) {
    R& v = r[c * stride];
    const double old = static_cast<double>(kernels::cast<S>(v));
    v = kernels::cast<R>(static_cast<S>((1.0 - momentum) * old + momentum * correction * static_cast<double>(b[c])));
  }
}

void update_running(const Tensor& running, const Tensor& batch, double momentum, double correction) {
  visit_stats(running.dtype(), batch.dtype(),
              [&]<class R, class S>() { update_running<R, S>(running, batch, momentum, correction); });
}

}  // namespace

void batch_norm_forward(const BatchNormForward& a) {
  visit_input(a.x.dtype(), a.mean.dtype(), [&]<class T, class S>() { forward<T, S>(a); });
}

void batch_norm_backward(const BatchNormBackward& a) {
  visit_input(a.x.dtype(), a.mean.dtype(), [&]<class T, class S>() { backward<T, S>(a); });
}

void batch_norm_update_running(const BatchNormRunningUpdate& a) {
  update_running(a.running_mean, a.mean, a.momentum, 1.0);
  update_running(a.running_var, a.var, a.momentum, a.var_correction);
}

}  // namespace mixgrad::backend::cpu

namespace mixgrad::backend {

MIXGRAD_CPU_KERNEL(batch_norm_forward, cpu::batch_norm_forward);
MIXGRAD_CPU_KERNEL(batch_norm_backward, cpu::batch_norm_backward);
MIXGRAD_CPU_KERNEL(batch_norm_update_running, cpu::batch_norm_update_running);

}  // namespace mixgrad::backend
