// CPU kernels of the losses. Each loss is one fused pass over its input in
// the accumulation type (float, or double for float64): no temporaries the
// size of the logits, no chain of small ops.
//
// Sums over samples are formed in fixed blocks whose partial sums are added
// in order, so a loss is bit-identical on any thread count.
//
// The class losses' forwards check each label as they read it: a bad one is
// skipped and reported (the first in sample order) in the label status, and
// the reduction is not written.
// Without trapping math GCC computes both arms of the exponential's clamps
// and vectorises the tile loops (see cpu/elementwise.cpp). Scoped to this
// file; it precedes the includes so the templates instantiated here get it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <atomic>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/loss.hpp"
#include "backend/copy.hpp"
#include "backend/cpu/vector_exp.hpp"
#include "backend/cpu/isa_variants.hpp"
#include "kernels/cast.hpp"
#include "kernels/loops.hpp"
#include "kernels/loss.hpp"

// The float32 rows pass GCC vector types between always-inlined functions
// only; the ABI notes GCC gives for them do not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace mixgrad::backend::cpu {

namespace {

using kernels::cast;


constexpr int64_t kSumBlock = 8192;  // elements per partial sum
constexpr int kLanes = 8;            // independent accumulators, so the block sum vectorises
constexpr int64_t kTile = 64;        // inner positions handled together when the class axis is strided

/// sum_{i < n} of the values fill(lo, hi, buf) writes into buf[0, hi - lo)
/// for each block [lo, hi) of kSumBlock elements, deterministic: fixed
/// blocks, kLanes accumulators per block (element i to lane (i - lo) %
/// kLanes), partials added in double in block order.
template <class Acc, class Fill>
double blocked_sum_of(int64_t n, const Fill& fill) {
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
  kernels::parallel_for(blocks, kernels::kParallelGrain / kSumBlock, [&](int64_t b, int64_t e) {
    Acc buf[kSumBlock];  // on the stack (32 or 64 KiB): no allocation per loss
    for (int64_t blk = b; blk < e; ++blk) {
      const int64_t lo = blk * kSumBlock, len = std::min(n, lo + kSumBlock) - lo;
      fill(lo, lo + len, buf);
      Acc lanes[kLanes] = {};
      int64_t i = 0;
      for (; i + kLanes <= len; i += kLanes)
        for (int k = 0; k < kLanes; ++k) lanes[k] += buf[i + k];
      for (; i < len; ++i) lanes[0] += buf[i];
      double s = 0;
      for (int k = 0; k < kLanes; ++k) s += static_cast<double>(lanes[k]);
      partial[blk] = s;
    }
  });
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

/// sum_{i < n} value(i), as blocked_sum_of.
template <class Acc, class Value>
double blocked_sum(int64_t n, const Value& value) {
  return blocked_sum_of<Acc>(n, [&](int64_t lo, int64_t hi, Acc* buf) {
    for (int64_t i = lo; i < hi; ++i) buf[i - lo] = value(i);
  });
}

/// Writes per-sample losses (reduction none) or their mean / sum into out.
template <class T, class Acc>
void write_reduced(const std::vector<Acc>& loss, LossReduction reduction, const Tensor& out) {
  const int64_t n = static_cast<int64_t>(loss.size());
  T* o = writable<T>(out);
  if (reduction == LossReduction::none) {
    kernels::parallel_for(n, kernels::kParallelGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) o[i] = cast<T>(loss[i]);
    });
    return;
  }
  const double total = blocked_sum<Acc>(n, [&](int64_t i) { return loss[i]; });
  // mean of no samples is 0 / 0 = nan, as a mean of nothing should be
  o[0] = cast<T>(reduction == LossReduction::mean ? total / static_cast<double>(n) : total);
}

/// The upstream gradient's factor for sample i: g[i] for none, g / n for
/// mean, g for sum.
template <class T, class Acc>
struct GradScale {
  const T* g;
  LossReduction reduction;
  Acc uniform;
  GradScale(const Tensor& grad_out, LossReduction r, int64_t n) : g(grad_out.data<T>()), reduction(r) {
    uniform = r == LossReduction::none ? Acc(0) : cast<Acc>(g[0]);
    if (r == LossReduction::mean) uniform /= static_cast<Acc>(n);
  }
  Acc operator()(int64_t i) const { return reduction == LossReduction::none ? cast<Acc>(g[i]) : uniform; }
};

template <class F>
decltype(auto) visit_labels(DType t, F&& f) {
  if (t == DType::int32) return f.template operator()<int32_t>();
  return f.template operator()<int64_t>();
}

/// True when label is in [0, classes): one unsigned comparison.
template <class L>
bool label_in_range(L label, int64_t classes) {
  return static_cast<uint64_t>(static_cast<int64_t>(label)) < static_cast<uint64_t>(classes);
}

/// The first sample (in sample order) with a bad label, as the threads of one
/// forward find them. report() runs only for bad labels, so the atomic costs
/// nothing on the normal path.
class FirstBadLabel {
 public:
  explicit FirstBadLabel(int64_t samples) : samples_(samples), first_(samples) {}
  void report(int64_t sample) {
    int64_t seen = first_.load(std::memory_order_relaxed);
    while (sample < seen && !first_.compare_exchange_weak(seen, sample, std::memory_order_relaxed)) {
    }
  }
  /// Writes the label status ({-1, 0}, or {index, label}); true when a label was bad.
  template <class L>
  bool write(const L* labels, const Tensor& status) const {
    const int64_t first = first_.load(std::memory_order_relaxed);
    int64_t* st = writable<int64_t>(status);
    const bool bad = first < samples_;
    st[0] = bad ? first : -1;
    st[1] = bad ? static_cast<int64_t>(labels[first]) : 0;
    return bad;
  }

 private:
  int64_t samples_;
  std::atomic<int64_t> first_;
};

/// Rows of C classes per parallel chunk: enough work to pay for a thread.
int64_t row_grain(int64_t classes) { return std::max<int64_t>(1, kernels::kParallelGrain / std::max<int64_t>(1, classes)); }

/// The walk of the strided layout [N, C, d...], where classes are `inner`
/// apart: tile(o, i0, n) for each tile of up to kTile positions
/// [i0, i0 + n) of each outer slice o, tiles in parallel.
template <class Tile>
void for_each_tile(const ClassLayout& layout, const Tile& tile) {
  const int64_t tiles_per_outer = (layout.inner + kTile - 1) / kTile;
  const int64_t grain = row_grain(layout.classes * kTile);
  kernels::parallel_for(layout.outer * tiles_per_outer, grain, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t i0 = (t % tiles_per_outer) * kTile;
      tile(t / tiles_per_outer, i0, std::min(kTile, layout.inner - i0));
    }
  });
}

// ---- cross-entropy rows of float32, a vector at a time ---------------------
//
// A float32 row of logits [C] is the common case (a language model's vocabulary):
// its maximum, sum of e^z and sum of z (z = x - max), and its gradient, run
// on vector types with the exponential of backend/cpu/vector_exp.hpp, in
// portable, AVX2 and AVX-512 variants. The sums keep kRowLanes partial sums,
// element j going to lane j % kRowLanes whatever the vector width, so every
// variant adds in the same order.

constexpr int kRowLanes = 16;

/// Row statistics: its maximum m, sum of e^(x - m) and sum of (x - m).
template <class Acc>
struct RowStats {
  Acc m, sum, z_sum;
};

template <int Bytes>
[[gnu::always_inline]] inline RowStats<float> row_stats(const float* row, int64_t C) {
  using V = typename tiles::Vec<float, Bytes>::type;
  constexpr int W = tiles::Vec<float, Bytes>::lanes, Q = kRowLanes / W;
  V mv = V{} + row[0];
  int64_t j = 0;
  for (; j + W <= C; j += W) {
    const V v = tiles::load<V>(row + j);
    mv = v > mv ? v : mv;  // a NaN never wins, as in the scalar loop; row[0] NaN stays
  }
  float m = row[0];
  for (int l = 0; l < W; ++l) m = mv[l] > m ? mv[l] : m;
  for (; j < C; ++j) m = row[j] > m ? row[j] : m;
  V sv[Q], zv[Q];
  for (int q = 0; q < Q; ++q) sv[q] = zv[q] = V{};
  alignas(64) float e[kRowLanes];
  j = 0;
  for (; j + kRowLanes <= C; j += kRowLanes) {
    for (int q = 0; q < Q; ++q) {
      const V z = tiles::load<V>(row + j + q * W) - m;
      zv[q] += z;
      tiles::store(e + q * W, z);
      tiles::exp_nonpositive<Bytes>(e + q * W);
      sv[q] += tiles::load<V>(e + q * W);
    }
  }
  float sum = 0, z_sum = 0;
  for (int q = 0; q < Q; ++q)
    for (int l = 0; l < W; ++l) {
      sum += sv[q][l];
      z_sum += zv[q][l];
    }
  for (; j < C; ++j) {
    const float z = row[j] - m;
    sum += kernels::exp_float_nonpositive(z);
    z_sum += z;
  }
  return {m, sum, z_sum};
}

/// g[j] = k (e^((x[j] - m) - log_sum) - target) for j < C: the row's gradient
/// before its label's entry is set.
template <int Bytes>
[[gnu::always_inline]] inline void row_grad(const float* row, int64_t C, float m, float log_sum, float target, float k,
                                            float* g) {
  using V = typename tiles::Vec<float, Bytes>::type;
  constexpr int W = tiles::Vec<float, Bytes>::lanes;
  int64_t j = 0;
  for (; j + W <= C; j += W) {
    tiles::store(g + j, (tiles::load<V>(row + j) - m) - log_sum);
    tiles::exp_nonpositive<Bytes>(g + j);
    tiles::store(g + j, k * (tiles::load<V>(g + j) - target));
  }
  for (; j < C; ++j) g[j] = k * (kernels::exp_float_nonpositive((row[j] - m) - log_sum) - target);
}

/// The other dtypes' rows (float64, and the 16-bit ones in float), one
/// element at a time in Acc with libm's exp.
template <class T, class Acc = kernels::compute_t<T>>
RowStats<Acc> row_stats_scalar(const T* row, int64_t C) {
  Acc m = cast<Acc>(row[0]);
  for (int64_t j = 1; j < C; ++j) {
    const Acc v = cast<Acc>(row[j]);
    m = v > m ? v : m;
  }
  Acc sum = 0, z_sum = 0;
  for (int64_t j = 0; j < C; ++j) {
    const Acc z = cast<Acc>(row[j]) - m;
    sum += std::exp(z);
    z_sum += z;
  }
  return {m, sum, z_sum};
}

template <class T, class Acc = kernels::compute_t<T>>
void row_grad_scalar(const T* row, int64_t C, Acc m, Acc log_sum, Acc target, Acc k, T* g) {
  for (int64_t j = 0; j < C; ++j) g[j] = cast<T>(kernels::cross_entropy_grad(cast<Acc>(row[j]) - m, log_sum, target, k));
}

/// The row kernels (isa_variants.hpp): float32 rows on vector types of the
/// level's width, the other dtypes' one element at a time.
template <class T, class Acc = kernels::compute_t<T>>
struct StatsKernel {
  template <int Bytes>
  [[gnu::always_inline]] RowStats<Acc> operator()(const T* row, int64_t C) const {
    if constexpr (std::is_same_v<T, float>) return row_stats<Bytes>(row, C);
    else return row_stats_scalar<T>(row, C);
  }
};
template <class T, class Acc = kernels::compute_t<T>>
struct GradKernel {
  template <int Bytes>
  [[gnu::always_inline]] void operator()(const T* row, int64_t C, Acc m, Acc log_sum, Acc target, Acc k, T* g) const {
    if constexpr (std::is_same_v<T, float>) row_grad<Bytes>(row, C, m, log_sum, target, k, g);
    else row_grad_scalar<T>(row, C, m, log_sum, target, k, g);
  }
};

/// The copy of kernel F a contiguous [N, C] of T runs: float32 that of the
/// instruction-set level in effect, the others the portable one (libm's
/// exp, the same bits at every level).
template <class T, class F, class... A>
isa::Copy<F, A...> row_copy() {
  if constexpr (std::is_same_v<T, float>) return isa::variant<F, A...>();
  else return &isa::on_portable<F, A...>;
}

/// The row kernels of a contiguous [N, C] of T.
template <class T, class Acc = kernels::compute_t<T>>
struct Rows {
  isa::Copy<StatsKernel<T>, const T*, int64_t> stats_copy = row_copy<T, StatsKernel<T>, const T*, int64_t>();
  isa::Copy<GradKernel<T>, const T*, int64_t, Acc, Acc, Acc, Acc, T*> grad_copy =
      row_copy<T, GradKernel<T>, const T*, int64_t, Acc, Acc, Acc, Acc, T*>();

  RowStats<Acc> stats(const T* row, int64_t C) const { return stats_copy({}, row, C); }
  void grad(const T* row, int64_t C, Acc m, Acc log_sum, Acc target, Acc k, T* g) const {
    grad_copy({}, row, C, m, log_sum, target, k, g);
  }
};

// ---- cross-entropy tiles of [N, C, d...], each position a lane ------------
//
// The loops over a tile's classes as jobs of isa::RunJob, compiled at each
// level: the inner loop runs over the tile's positions, which are contiguous,
// and vectorises: kernels::math::exp is exp_float in float (std::exp per
// element would keep it scalar).

/// The maxima m, sums of e^z and sums of z (z = x - m) of n positions whose
/// C classes lie `inner` apart from `base` on.
template <class T, class Acc = kernels::compute_t<T>>
struct TileStats {
  int64_t C, inner;
  [[gnu::always_inline]] void run(const T* base, int64_t n, Acc* m, Acc* sum, Acc* z_sum) const {
    for (int64_t i = 0; i < n; ++i) m[i] = cast<Acc>(base[i]);
    for (int64_t c = 1; c < C; ++c) {
      const T* row = base + c * inner;
      for (int64_t i = 0; i < n; ++i) {
        const Acc v = cast<Acc>(row[i]);
        m[i] = v > m[i] ? v : m[i];
      }
    }
    for (int64_t i = 0; i < n; ++i) sum[i] = z_sum[i] = 0;
    for (int64_t c = 0; c < C; ++c) {
      const T* row = base + c * inner;
      for (int64_t i = 0; i < n; ++i) {
        const Acc z = cast<Acc>(row[i]) - m[i];
        sum[i] += kernels::math::exp(z);
        z_sum[i] += z;
      }
    }
  }
};

/// g = k (e^((x - m) - log_sum) - target) at every class of n positions,
/// before the labels' entries are set.
template <class T, class Acc = kernels::compute_t<T>>
struct TileGrad {
  int64_t C, inner;
  Acc target;
  [[gnu::always_inline]] void run(const T* base, T* gbase, int64_t n, const Acc* m, const Acc* log_sum,
                                  const Acc* k) const {
    for (int64_t c = 0; c < C; ++c) {
      const T* row = base + c * inner;
      T* grow = gbase + c * inner;
      for (int64_t i = 0; i < n; ++i)
        grow[i] = cast<T>(kernels::cross_entropy_grad(cast<Acc>(row[i]) - m[i], log_sum[i], target, k[i]));
    }
  }
};

// ---- cross-entropy ---------------------------------------------------------

template <class T, class L>
void cross_entropy_forward_typed(const ClassLossArgs& a, const Tensor& out, const Tensor& stats,
                                 const Tensor& label_status) {
  using Acc = kernels::compute_t<T>;
  const T* x = a.input.data<T>();
  const L* y = a.labels.data<L>();
  Acc* st = writable<Acc>(stats);
  const int64_t C = a.layout.classes, inner = a.layout.inner;
  const int64_t samples = a.layout.samples();
  const kernels::CrossEntropySample<Acc> sample{static_cast<Acc>(a.label_smoothing), Acc(1) / static_cast<Acc>(C)};
  std::vector<Acc> loss(static_cast<size_t>(samples));
  FirstBadLabel bad(samples);

  if (inner == 1) {  // [N, C]: each row is contiguous
    const Rows<T> rows;
    kernels::parallel_for(samples, row_grain(C), [&](int64_t b, int64_t e) {
      for (int64_t s = b; s < e; ++s) {
        if (!label_in_range(y[s], C)) {
          bad.report(s);
          continue;
        }
        const T* row = x + s * C;
        const RowStats<Acc> r = rows.stats(row, C);
        const Acc log_sum = std::log(r.sum);
        loss[s] = sample(log_sum, cast<Acc>(row[y[s]]) - r.m, r.z_sum);
        st[2 * s] = r.m;
        st[2 * s + 1] = log_sum;
      }
    });
  } else {  // [N, C, d...]: walk a tile of positions at once
    const TileStats<T> stats_job{C, inner};
    const auto tile_stats = isa::variant<isa::RunJob, const TileStats<T>&, const T*, int64_t, Acc*, Acc*, Acc*>();
    for_each_tile(a.layout, [&](int64_t o, int64_t i0, int64_t n) {
      Acc m[kTile], sum[kTile], z_sum[kTile];
      const T* base = x + o * C * inner + i0;
      tile_stats({}, stats_job, base, n, m, sum, z_sum);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t s = o * inner + i0 + i;
        if (!label_in_range(y[s], C)) {
          bad.report(s);
          continue;
        }
        const Acc log_sum = std::log(sum[i]);
        loss[s] = sample(log_sum, cast<Acc>(base[y[s] * inner + i]) - m[i], z_sum[i]);
        st[2 * s] = m[i];
        st[2 * s + 1] = log_sum;
      }
    });
  }
  if (bad.write(y, label_status)) return;
  write_reduced<T>(loss, a.reduction, out);
}

template <class T, class L>
void cross_entropy_backward_typed(const ClassLossArgs& a, const Tensor& stats, const Tensor& grad_out,
                                  const Tensor& grad_input) {
  using Acc = kernels::compute_t<T>;
  const T* x = a.input.data<T>();
  const L* y = a.labels.data<L>();
  const Acc* st = writable<Acc>(stats);
  T* gx = writable<T>(grad_input);
  const int64_t C = a.layout.classes, inner = a.layout.inner;
  const int64_t samples = a.layout.samples();
  const GradScale<T, Acc> scale(grad_out, a.reduction, samples);
  const kernels::SmoothedTarget<Acc> q(static_cast<Acc>(a.label_smoothing), C);

  if (inner == 1) {
    const Rows<T> rows;
    kernels::parallel_for(samples, row_grain(C), [&](int64_t b, int64_t e) {
      for (int64_t s = b; s < e; ++s) {
        const T* row = x + s * C;
        T* grow = gx + s * C;
        const Acc m = st[2 * s], log_sum = st[2 * s + 1], k = scale(s);
        rows.grad(row, C, m, log_sum, q.off, k, grow);
        const L label = y[s];
        grow[label] = cast<T>(kernels::cross_entropy_grad(cast<Acc>(row[label]) - m, log_sum, q.on, k));
      }
    });
    return;
  }
  const TileGrad<T> grad_job{C, inner, q.off};
  const auto tile_grad =
      isa::variant<isa::RunJob, const TileGrad<T>&, const T*, T*, int64_t, const Acc*, const Acc*, const Acc*>();
  for_each_tile(a.layout, [&](int64_t o, int64_t i0, int64_t n) {
    Acc m[kTile] = {}, log_sum[kTile] = {}, k[kTile] = {};  // the first n are set; zeroed for -Wmaybe-uninitialized
    const int64_t off = o * C * inner + i0, s0 = o * inner + i0;
    for (int64_t i = 0; i < n; ++i) {
      m[i] = st[2 * (s0 + i)];
      log_sum[i] = st[2 * (s0 + i) + 1];
      k[i] = scale(s0 + i);
    }
    tile_grad({}, grad_job, x + off, gx + off, n, m, log_sum, k);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t at = off + y[s0 + i] * inner + i;
      gx[at] = cast<T>(kernels::cross_entropy_grad(cast<Acc>(x[at]) - m[i], log_sum[i], q.on, k[i]));
    }
  });
}

// ---- NLL -------------------------------------------------------------------

template <class T, class L>
void nll_loss_forward_typed(const ClassLossArgs& a, const Tensor& out, const Tensor& label_status) {
  using Acc = kernels::compute_t<T>;
  const T* x = a.input.data<T>();
  const L* y = a.labels.data<L>();
  const int64_t C = a.layout.classes, inner = a.layout.inner;
  const int64_t samples = a.layout.samples();
  std::vector<Acc> loss(static_cast<size_t>(samples));
  FirstBadLabel bad(samples);
  kernels::parallel_for(samples, kernels::kParallelGrain, [&](int64_t b, int64_t e) {
    for (int64_t s = b; s < e; ++s) {
      if (!label_in_range(y[s], C)) {
        bad.report(s);
        continue;
      }
      const int64_t o = s / inner, i = s % inner;
      loss[s] = -cast<Acc>(x[(o * C + y[s]) * inner + i]);
    }
  });
  if (bad.write(y, label_status)) return;
  write_reduced<T>(loss, a.reduction, out);
}

template <class T, class L>
void nll_loss_backward_typed(const ClassLossArgs& a, const Tensor& grad_out, const Tensor& grad_input) {
  using Acc = kernels::compute_t<T>;
  const L* y = a.labels.data<L>();
  T* gx = writable<T>(grad_input);
  const int64_t outer = a.layout.outer, C = a.layout.classes, inner = a.layout.inner;
  const GradScale<T, Acc> scale(grad_out, a.reduction, a.layout.samples());
  const T zero = cast<T>(0.0f);
  kernels::parallel_for(outer, row_grain(C * inner), [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      T* slab = gx + o * C * inner;
      for (int64_t j = 0; j < C * inner; ++j) slab[j] = zero;
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t s = o * inner + i;
        slab[y[s] * inner + i] = cast<T>(-scale(s));
      }
    }
  });
}

// ---- pointwise losses ------------------------------------------------------

// The pointwise losses' loops as jobs of isa::RunJob, compiled at each
// level, so that a loss with real math (binary cross-entropy's exp and
// log1p, float through kernels/fast_float.hpp) vectorises.

/// out[i - lo] = value(pred[i], target[i]) for i in [lo, hi), as Out (Acc
/// for a sum, T for reduction none).
template <template <class> class Loss, class T, class Out>
struct PointwiseValues {
  using Acc = kernels::compute_t<T>;
  const T* p;
  const T* t;
  [[gnu::always_inline]] void run(int64_t lo, int64_t hi, Out* out) const {
    const Loss<Acc> f;
    for (int64_t i = lo; i < hi; ++i) out[i - lo] = cast<Out>(f.value(cast<Acc>(p[i]), cast<Acc>(t[i])));
  }
};

/// The gradients of pred (gp) and target (gt), each where non-null, for i in
/// [lo, hi): scale * the loss's derivative, scale g[i] (reduction none) or
/// the uniform k.
template <template <class> class Loss, class T>
struct PointwiseGrads {
  using Acc = kernels::compute_t<T>;
  const T* p;
  const T* t;
  T* gp;
  T* gt;
  const T* g;  // null: every element scaled by k
  Acc k;
  [[gnu::always_inline]] void run(int64_t lo, int64_t hi) const {
    // Two instantiations of the loops, so the per-element one has no branch on the reduction.
    const auto loops = [&](const auto& scale) {
      const Loss<Acc> f;
      if (gp)
        for (int64_t i = lo; i < hi; ++i) gp[i] = cast<T>(scale(i) * f.grad_pred(cast<Acc>(p[i]), cast<Acc>(t[i])));
      if (gt)
        for (int64_t i = lo; i < hi; ++i) gt[i] = cast<T>(scale(i) * f.grad_target(cast<Acc>(p[i]), cast<Acc>(t[i])));
    };
    if (g) loops([this](int64_t i) { return cast<Acc>(g[i]); });
    else loops([this](int64_t) { return k; });
  }
};

template <template <class> class Loss, class T>
void pointwise_forward_typed(const PointwiseLossArgs& a, const Tensor& out) {
  using Acc = kernels::compute_t<T>;
  const T* p = a.pred.data<T>();
  const T* t = a.target.data<T>();
  const int64_t n = a.pred.numel();
  T* o = writable<T>(out);
  if (a.reduction == LossReduction::none) {
    const PointwiseValues<Loss, T, T> job{p, t};
    const auto values = isa::variant<isa::RunJob, const PointwiseValues<Loss, T, T>&, int64_t, int64_t, T*>();
    kernels::parallel_for(n, kernels::kParallelGrain, [&](int64_t b, int64_t e) { values({}, job, b, e, o + b); });
    return;
  }
  const PointwiseValues<Loss, T, Acc> job{p, t};
  const auto values = isa::variant<isa::RunJob, const PointwiseValues<Loss, T, Acc>&, int64_t, int64_t, Acc*>();
  const double total = blocked_sum_of<Acc>(n, [&](int64_t lo, int64_t hi, Acc* buf) { values({}, job, lo, hi, buf); });
  o[0] = cast<T>(a.reduction == LossReduction::mean ? total / static_cast<double>(n) : total);
}

template <template <class> class Loss, class T>
void pointwise_backward_typed(const PointwiseLossArgs& a, const Tensor& grad_out, const LossGrads& grads) {
  using Acc = kernels::compute_t<T>;
  const int64_t n = a.pred.numel();
  PointwiseGrads<Loss, T> job{a.pred.data<T>(),
                              a.target.data<T>(),
                              grads.input.defined() ? writable<T>(grads.input) : nullptr,
                              grads.target.defined() ? writable<T>(grads.target) : nullptr,
                              nullptr,
                              Acc(0)};
  if (a.reduction == LossReduction::none) job.g = grad_out.data<T>();
  else job.k = GradScale<T, Acc>(grad_out, a.reduction, n)(0);
  const auto run = isa::variant<isa::RunJob, const PointwiseGrads<Loss, T>&, int64_t, int64_t>();
  kernels::parallel_for(n, kernels::kParallelGrain, [&](int64_t b, int64_t e) { run({}, job, b, e); });
}

/// Calls f.template operator()<Loss>() with the functor template of `kind`.
template <class F>
void visit_pointwise(PointwiseLoss kind, F&& f) {
  switch (kind) {
    case PointwiseLoss::mse: return f.template operator()<kernels::MseLoss>();
    case PointwiseLoss::l1: return f.template operator()<kernels::L1Loss>();
    case PointwiseLoss::bce_with_logits: return f.template operator()<kernels::BceWithLogitsLoss>();
  }
}

}  // namespace

void cross_entropy_forward(const ClassLossArgs& a, const Tensor& out, const Tensor& stats,
                           const Tensor& label_status) {
  visit_floating(a.input.dtype(), "cross_entropy", [&]<class T>() {
    visit_labels(a.labels.dtype(),
                 [&]<class L>() { cross_entropy_forward_typed<T, L>(a, out, stats, label_status); });
  });
}

void cross_entropy_backward(const ClassLossArgs& a, const Tensor& stats, const Tensor& grad_out,
                            const Tensor& grad_input) {
  visit_floating(a.input.dtype(), "cross_entropy", [&]<class T>() {
    visit_labels(a.labels.dtype(),
                 [&]<class L>() { cross_entropy_backward_typed<T, L>(a, stats, grad_out, grad_input); });
  });
}

void nll_loss_forward(const ClassLossArgs& a, const Tensor& out, const Tensor& label_status) {
  visit_floating(a.input.dtype(), "nll_loss", [&]<class T>() {
    visit_labels(a.labels.dtype(), [&]<class L>() { nll_loss_forward_typed<T, L>(a, out, label_status); });
  });
}

void nll_loss_backward(const ClassLossArgs& a, const Tensor& grad_out, const Tensor& grad_input) {
  visit_floating(grad_input.dtype(), "nll_loss", [&]<class T>() {
    visit_labels(a.labels.dtype(), [&]<class L>() { nll_loss_backward_typed<T, L>(a, grad_out, grad_input); });
  });
}

void pointwise_loss_forward(const PointwiseLossArgs& a, const Tensor& out) {
  visit_pointwise(a.kind, [&]<template <class> class Loss>() {
    visit_floating(a.pred.dtype(), "loss", [&]<class T>() { pointwise_forward_typed<Loss, T>(a, out); });
  });
}

void pointwise_loss_backward(const PointwiseLossArgs& a, const Tensor& grad_out, const LossGrads& grads) {
  visit_pointwise(a.kind, [&]<template <class> class Loss>() {
    visit_floating(a.pred.dtype(), "loss", [&]<class T>() { pointwise_backward_typed<Loss, T>(a, grad_out, grads); });
  });
}

}  // namespace mixgrad::backend::cpu

namespace mixgrad::backend {

MIXGRAD_CPU_KERNEL(cross_entropy_forward, cpu::cross_entropy_forward);
MIXGRAD_CPU_KERNEL(cross_entropy_backward, cpu::cross_entropy_backward);
MIXGRAD_CPU_KERNEL(nll_loss_forward, cpu::nll_loss_forward);
MIXGRAD_CPU_KERNEL(nll_loss_backward, cpu::nll_loss_backward);
MIXGRAD_CPU_KERNEL(pointwise_loss_forward, cpu::pointwise_loss_forward);
MIXGRAD_CPU_KERNEL(pointwise_loss_backward, cpu::pointwise_loss_backward);

}  // namespace mixgrad::backend
