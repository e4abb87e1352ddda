// CPU reductions.
//
// The input's dimensions are first coalesced (extent-1 dimensions dropped,
// neighbours of the same kind that are contiguous merged), which turns the
// common cases into one of two shapes, both read in place with unit stride:
//  - the innermost dimension is reduced ("rows"): reduce-all, the last axis,
//    [N, C, H*W] over {N, H*W}. Each output folds contiguous runs with
//    kLanes independent accumulators (a loop the compiler vectorises, and a
//    shorter dependency chain for the sum's rounding error).
//  - the innermost dimension is kept ("columns"): the leading axis of
//    [N, C], a bias gradient. Whole rows are folded into a vector of column
//    accumulators, again unit stride.
// Work is split across threads by outputs when there are enough of them,
// otherwise by the reduced range with per-thread partial results. Inputs
// whose innermost stride is not 1 (transposed or broadcast views) are
// copied to contiguous memory first.
//
// Sums are folded in blocks (kRunBlock elements / kRowFlush rows) whose
// partial results are then combined, so float accumulators keep their
// precision on long reductions.
//
// sum_channels, the bias gradient of linear and conv2d, is the per-channel
// sum of an [outer, channels, inner] tensor in one pass. prod and its
// gradient run along one axis of an [outer, axis, inner] view.
// Kernels here never rely on floating-point exceptions: without trapping
// math GCC may compute both arms of a select (leaky_relu, the gradients of
// maximum / clamp, NaN-propagating max) and vectorise the loop, instead of
// branching per element. Scoped to this file; it precedes the includes so
// the templates instantiated here get it too.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include "backend/reduction.hpp"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/copy.hpp"
#include "backend/cpu/isa_variants.hpp"
#include "backend/cpu/line_blocks.hpp"
#include "backend/cpu/map_loop.hpp"
#include "kernels/loops.hpp"
#include "kernels/reduce.hpp"

namespace mixgrad::backend::cpu {

namespace {

constexpr int kLanes = 16;
constexpr int64_t kRunBlock = 2048;
constexpr int64_t kColBlock = 256;
constexpr int64_t kRowFlush = 1024;

// ---- layout ----------------------------------------------------------------

/// A row-major product of dimensions with element strides into x.
struct Space {
  int n = 0;
  std::array<int64_t, Shape::kMaxDims> extent{};
  std::array<int64_t, Shape::kMaxDims> stride{};

  void push(int64_t e, int64_t s) {
    extent[n] = e;
    stride[n] = s;
    ++n;
  }
  int64_t count() const {
    int64_t c = 1;
    for (int d = 0; d < n; ++d) c *= extent[d];
    return c;
  }
};

/// Walks a Space in row-major order, keeping the element offset.
struct Odometer {
  const Space& s;
  std::array<int64_t, Shape::kMaxDims> idx{};
  int64_t off = 0;

  Odometer(const Space& space, int64_t linear) : s(space) {
    for (int d = s.n - 1; d >= 0; --d) {
      idx[d] = linear % s.extent[d];
      linear /= s.extent[d];
      off += idx[d] * s.stride[d];
    }
  }
  void next() {
    for (int d = s.n - 1; d >= 0; --d) {
      off += s.stride[d];
      if (++idx[d] < s.extent[d]) return;
      off -= s.stride[d] * s.extent[d];
      idx[d] = 0;
    }
  }
};

struct Layout {
  Space kept;           // kept dims, outermost first (excluding `inner` when it is kept)
  Space reduced;        // reduced dims (excluding `inner` when it is reduced)
  int64_t inner = 1;    // extent of the innermost coalesced dim (unit stride)
  bool inner_reduced = true;
  bool unit_stride = true;
};

Layout make_layout(const Tensor& x, uint32_t axes) {
  struct Dim {
    int64_t extent, stride;
    bool reduced;
  };
  std::array<Dim, Shape::kMaxDims> dims{};
  int n = 0;
  for (int d = 0; d < x.ndim(); ++d) {
    const int64_t e = x.shape()[d];
    if (e == 1) continue;
    const bool red = (axes >> d) & 1u;
    if (n > 0 && dims[n - 1].reduced == red && dims[n - 1].stride == x.strides()[d] * e) {
      dims[n - 1].extent *= e;
      dims[n - 1].stride = x.strides()[d];
    } else {
      dims[n++] = {e, x.strides()[d], red};
    }
  }
  if (n == 0) dims[n++] = {1, 1, true};  // a single element
  Layout L;
  const Dim& last = dims[n - 1];
  L.inner = last.extent;
  L.inner_reduced = last.reduced;
  L.unit_stride = last.stride == 1;
  for (int d = 0; d + 1 < n; ++d) (dims[d].reduced ? L.reduced : L.kept).push(dims[d].extent, dims[d].stride);
  return L;
}

/// A small array on the stack, on the heap when large.
template <class A>
class Buffer {
 public:
  explicit Buffer(int64_t n) {
    if (n > kSmall) heap_ = std::make_unique<A[]>(static_cast<size_t>(n));
  }
  A* data() { return heap_ ? heap_.get() : small_; }

 private:
  static constexpr int64_t kSmall = 64;
  A small_[kSmall];
  std::unique_ptr<A[]> heap_;
};

// ---- folding ---------------------------------------------------------------

template <class A, class V, class Red>
A fold_contiguous(const V* v, int64_t n, const Red& r, A c) {
  A lane[kLanes];
  for (int j = 0; j < kLanes; ++j) lane[j] = Red::identity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int j = 0; j < kLanes; ++j) lane[j] = Red::combine(lane[j], r.map(kernels::cast<A>(v[i + j]), c));
  }
  A tail = Red::identity();
  for (; i < n; ++i) tail = Red::combine(tail, r.map(kernels::cast<A>(v[i]), c));
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int j = 0; j < w; ++j) lane[j] = Red::combine(lane[j], lane[j + w]);
  return Red::combine(lane[0], tail);
}

/// Folds n contiguous elements of T (16-bit floats converted block-wise).
template <class T, class A, class Red>
A fold_run(const T* x, int64_t n, const Red& r, A c) {
  A total = Red::identity();
  for (int64_t b0 = 0; b0 < n; b0 += kRunBlock) {
    const int64_t len = std::min(kRunBlock, n - b0);
    if constexpr (detail::is_16bit_float<T>) {
      alignas(64) float buf[kRunBlock];
      convert(x + b0, buf, len);
      total = Red::combine(total, fold_contiguous<A>(buf, len, r, c));
    } else {
      total = Red::combine(total, fold_contiguous<A>(x + b0, len, r, c));
    }
  }
  return total;
}

template <class T, class A, class Red>
struct Reduction {
  const T* x;
  const Layout& L;
  const Red& red;
  const A* center;  // per output, or null
  A* out;           // per output

  void run() const {
    const int64_t total = L.kept.count() * L.reduced.count() * L.inner;
    const int threads = total < kernels::kParallelGrain ? 1 : omp_get_max_threads();
    if (L.inner_reduced) rows(threads);
    else columns(threads);
  }

  // Innermost dimension reduced: output o folds runs [r0, r1) of the
  // reduced space, elements [e0, e1) of each run.
  A fold_output(int64_t o, int64_t r0, int64_t r1, int64_t e0, int64_t e1) const {
    const T* base = x + Odometer(L.kept, o).off + e0;
    const A c = center ? center[o] : A(0);
    A acc = Red::identity();
    Odometer od(L.reduced, r0);
    for (int64_t run = r0; run < r1; ++run, od.next()) acc = Red::combine(acc, fold_run<T, A>(base + od.off, e1 - e0, red, c));
    return acc;
  }

  void rows(int threads) const {
    const int64_t outs = L.kept.count(), runs = L.reduced.count(), n = L.inner;
    if (threads <= 1) {
      for (int64_t o = 0; o < outs; ++o) out[o] = fold_output(o, 0, runs, 0, n);
      return;
    }
    if (outs >= threads) {
      kernels::parallel_for(outs, 1, [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) out[o] = fold_output(o, 0, runs, 0, n);
      });
      return;
    }
    // Few outputs (reduce-all): split each one's runs, or its single run.
    std::vector<A> part(static_cast<size_t>(threads));
    for (int64_t o = 0; o < outs; ++o) {
      const bool by_runs = runs >= threads;
      const int64_t span = by_runs ? runs : n;
      const int64_t chunk = (span + threads - 1) / threads;
#pragma omp parallel for schedule(static) num_threads(threads)
      for (int t = 0; t < threads; ++t) {
        const int64_t b = std::min(span, t * chunk), e = std::min(span, b + chunk);
        part[t] = by_runs ? fold_output(o, b, e, 0, n) : fold_output(o, 0, runs, b, e);
      }
      A acc = Red::identity();
      for (int t = 0; t < threads; ++t) acc = Red::combine(acc, part[t]);
      out[o] = acc;
    }
  }

  // Few columns whose rows follow each other in memory ([N, C] with small
  // C): a run of rows is one contiguous block, folded with lanes of a width
  // that is a multiple of C (lane j holds column j % C), so the loop
  // vectorises instead of paying a short loop per row.
  bool narrow() const {
    return !L.inner_reduced && L.inner <= kLanes && L.reduced.n > 0 && L.reduced.stride[L.reduced.n - 1] == L.inner;
  }

  void fold_narrow(int64_t o, int64_t r0, int64_t r1, A* acc) const {
    const int64_t k = L.inner;
    const int64_t reps = (kLanes + k - 1) / k, lw = reps * k;  // lw < 2 * kLanes
    const int64_t chunk_rows = std::max<int64_t>(1, kRunBlock / lw) * reps;
    const int64_t extent = L.reduced.extent[L.reduced.n - 1];
    const T* kbase = x + Odometer(L.kept, o).off;
    alignas(64) A cen[2 * kLanes];
    for (int64_t j = 0; j < lw; ++j) cen[j] = center ? center[o * k + j % k] : A(0);
    alignas(64) float conv[kRunBlock + 2 * kLanes];
    alignas(64) A lane[2 * kLanes];
    for (int64_t r = r0; r < r1;) {
      const int64_t seg = std::min(r1 - r, extent - r % extent);  // rows contiguous in memory
      const T* p = kbase + Odometer(L.reduced, r).off;
      for (int64_t c0 = 0; c0 < seg; c0 += chunk_rows) {
        const int64_t n = std::min(chunk_rows, seg - c0) * k;
        auto fold_block = [&](const auto* v) {
          for (int64_t j = 0; j < lw; ++j) lane[j] = Red::identity();
          int64_t i = 0;
          for (; i + lw <= n; i += lw) {
#pragma omp simd
            for (int64_t j = 0; j < lw; ++j) lane[j] = Red::combine(lane[j], red.map(kernels::cast<A>(v[i + j]), cen[j]));
          }
          for (int64_t j = 0; i + j < n; ++j) lane[j] = Red::combine(lane[j], red.map(kernels::cast<A>(v[i + j]), cen[j]));
          for (int64_t j = 0; j < lw; ++j) acc[j % k] = Red::combine(acc[j % k], lane[j]);
        };
        if constexpr (detail::is_16bit_float<T>) {
          convert(p + c0 * k, conv, n);
          fold_block(conv);
        } else {
          fold_block(p + c0 * k);
        }
      }
      r += seg;
    }
  }

  // Innermost dimension kept: folds rows [r0, r1) of columns [k0, k0 + w)
  // of outer position o into acc.
  void fold_columns(int64_t o, int64_t k0, int64_t w, int64_t r0, int64_t r1, A* acc) const {
    if (narrow()) {
      fold_narrow(o, r0, r1, acc);
      return;
    }
    const T* base = x + Odometer(L.kept, o).off + k0;
    const A* cen = center ? center + o * L.inner + k0 : nullptr;
    alignas(64) A part[kColBlock];
    alignas(64) float conv[kColBlock];
    Odometer od(L.reduced, r0);
    for (int64_t r = r0; r < r1;) {
      const int64_t stop = std::min(r1, r + kRowFlush);
      for (int64_t j = 0; j < w; ++j) part[j] = Red::identity();
      for (; r < stop; ++r, od.next()) {
        const T* row = base + od.off;
        auto fold_row = [&](const auto* v) {
          if (cen) {
#pragma omp simd
            for (int64_t j = 0; j < w; ++j) part[j] = Red::combine(part[j], red.map(kernels::cast<A>(v[j]), cen[j]));
          } else {
#pragma omp simd
            for (int64_t j = 0; j < w; ++j) part[j] = Red::combine(part[j], red.map(kernels::cast<A>(v[j]), A(0)));
          }
        };
        if constexpr (detail::is_16bit_float<T>) {
          convert(row, conv, w);
          fold_row(conv);
        } else {
          fold_row(row);
        }
      }
      for (int64_t j = 0; j < w; ++j) acc[j] = Red::combine(acc[j], part[j]);
    }
  }

  void columns(int threads) const {
    const int64_t outer = L.kept.count(), n = L.inner, rows = L.reduced.count();
    const int64_t chunks = (n + kColBlock - 1) / kColBlock, tasks = outer * chunks;
    auto task = [&](int64_t t) {
      const int64_t o = t / chunks, k0 = (t % chunks) * kColBlock, w = std::min(kColBlock, n - k0);
      A* acc = out + o * n + k0;
      for (int64_t j = 0; j < w; ++j) acc[j] = Red::identity();
      fold_columns(o, k0, w, 0, rows, acc);
    };
    if (threads <= 1 || tasks >= threads) {
      kernels::parallel_for(tasks, threads <= 1 ? tasks + 1 : 1, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) task(t);
      });
      return;
    }
    // Few columns ([N, C] with small C): split the rows, one partial per thread.
    const int64_t chunk = (rows + threads - 1) / threads;
    for (int64_t t0 = 0; t0 < tasks; ++t0) {
      const int64_t o = t0 / chunks, k0 = (t0 % chunks) * kColBlock, w = std::min(kColBlock, n - k0);
      std::vector<A> part(static_cast<size_t>(threads * w), Red::identity());
#pragma omp parallel for schedule(static) num_threads(threads)
      for (int t = 0; t < threads; ++t) {
        const int64_t b = std::min(rows, t * chunk), e = std::min(rows, b + chunk);
        fold_columns(o, k0, w, b, e, part.data() + t * w);
      }
      A* acc = out + o * n + k0;
      for (int64_t j = 0; j < w; ++j) {
        acc[j] = Red::identity();
        for (int t = 0; t < threads; ++t) acc[j] = Red::combine(acc[j], part[t * w + j]);
      }
    }
  }
};

template <class T, class A, class Red>
void fold(const T* x, const Layout& L, const Red& r, const A* center, A* out, int64_t outs) {
  if (L.reduced.count() * L.inner == 0) {  // nothing to fold (outs > 0, so a reduced extent is 0)
    for (int64_t o = 0; o < outs; ++o) out[o] = Red::identity();
    return;
  }
  Reduction<T, A, Red>{x, L, r, center, out}.run();
}

template <class A>
void store(const A* acc, const Tensor& out) {
  visit_dtype(out.dtype(), [&]<class O>() {
    O* o = static_cast<O*>(out.raw_data());
    const int64_t n = out.numel();
    for (int64_t i = 0; i < n; ++i) o[i] = kernels::cast<O>(acc[i]);
  });
}

Tensor contiguous_copy(const Tensor& x) {
  Tensor c = empty(x.shape(), x.dtype(), x.device());
  copy_kernel(x, c);
  return c;
}

// Channels [c0, c1) of sum_channels: out[c] += x[o, c, i] over o and i,
// converted to Acc. A job of isa::RunJob, so the loops are compiled at each
// level's width (the 16-bit conversions and the row adds of a bias
// gradient vectorise at AVX-512 width where it runs, not at the library's
// baseline).
template <class T, class Acc>
struct ChannelSums {
  const T* x;
  Acc* acc;
  int64_t outer, channels, inner;

  [[gnu::always_inline]] void run(int64_t c0, int64_t c1) const {
    for (int64_t o = 0; o < outer; ++o) {
      const T* row = x + o * channels * inner;
      if (inner == 1) {
        for (int64_t c = c0; c < c1; ++c) acc[c] += kernels::cast<Acc>(row[c]);
        continue;
      }
      for (int64_t c = c0; c < c1; ++c) {
        const T* q = row + c * inner;
        Acc s = 0;
        for (int64_t i = 0; i < inner; ++i) s += kernels::cast<Acc>(q[i]);
        acc[c] += s;
      }
    }
  }
};

// out[c] = sum of x[o, c, i] over o and i, accumulated per channel: one
// pass over x, channels split across threads.
template <class T>
void sum_channels_typed(const Tensor& x, int64_t outer, int64_t channels, int64_t inner, const Tensor& out) {
  using Acc = kernels::compute_t<T>;
  // The sums go straight into `out` when it holds the accumulator's dtype
  // (float32 and float64 bias gradients), else into a tensor from the host
  // cache: no heap vector per call (glibc's consolidation of those showed
  // in the MLP step's profile).
  const bool direct = out.dtype() == dtype_of<Acc>() && out.is_contiguous();
  const Tensor acc_t = direct ? out : empty(Shape{channels}, dtype_of<Acc>(), out.device());
  const ChannelSums<T, Acc> job{static_cast<const T*>(x.raw_data()), static_cast<Acc*>(acc_t.raw_data()), outer,
                                channels, inner};
  std::fill(job.acc, job.acc + channels, Acc(0));
  const auto run = isa::variant<isa::RunJob, const ChannelSums<T, Acc>&, int64_t, int64_t>();
  const int64_t work = outer * inner;
  kernels::parallel_for(channels, std::max<int64_t>(1, kernels::kParallelGrain / std::max<int64_t>(1, work)),
                        [&](int64_t c0, int64_t c1) { run({}, job, c0, c1); });
  if (!direct) copy_kernel(acc_t, out);
}

}  // namespace

void reduce(ReduceOp op, const Tensor& x_in, uint32_t axes, const Tensor& out, const ReduceParams& params) {
  const int64_t outs = out.numel();
  if (outs == 0) return;
  Tensor x = x_in;
  Layout L = make_layout(x, axes);
  if (!L.unit_stride && x.numel() > 0) {
    x = contiguous_copy(x);
    L = make_layout(x, axes);
  }
  int64_t count = 1;  // elements folded into each output
  for (int d = 0; d < x.ndim(); ++d)
    if ((axes >> d) & 1u) count *= x.shape()[d];

  visit_dtype(x.dtype(), [&]<class T>() {
    using A = kernels::acc_t<T>;
    const T* px = x.numel() > 0 ? x.data<T>() : nullptr;
    Buffer<A> acc_buf(outs);
    A* acc = acc_buf.data();
    if constexpr (std::is_floating_point_v<A>) {
      switch (op) {
        case ReduceOp::sum: fold<T, A>(px, L, kernels::SumReducer<A>{}, nullptr, acc, outs); break;
        case ReduceOp::mean:
          fold<T, A>(px, L, kernels::SumReducer<A>{}, nullptr, acc, outs);
          for (int64_t o = 0; o < outs; ++o) acc[o] /= static_cast<A>(count);
          break;
        case ReduceOp::max: fold<T, A>(px, L, kernels::MaxReducer<A>{}, nullptr, acc, outs); break;
        case ReduceOp::min: fold<T, A>(px, L, kernels::MinReducer<A>{}, nullptr, acc, outs); break;
        case ReduceOp::var: {
          Buffer<A> mean_buf(outs);
          A* mean = mean_buf.data();
          fold<T, A>(px, L, kernels::SumReducer<A>{}, nullptr, mean, outs);
          for (int64_t o = 0; o < outs; ++o) mean[o] /= static_cast<A>(count);
          fold<T, A>(px, L, kernels::SquaredDeviationReducer<A>{}, mean, acc, outs);
          const A divisor = static_cast<A>(std::max<int64_t>(0, count - params.correction));
          for (int64_t o = 0; o < outs; ++o) acc[o] /= divisor;
          break;
        }
        case ReduceOp::norm: {
          const double p = params.p;
          if (p == 2.0) {
            fold<T, A>(px, L, kernels::SquareReducer<A>{}, nullptr, acc, outs);
            for (int64_t o = 0; o < outs; ++o) acc[o] = std::sqrt(acc[o]);
          } else if (p == 1.0) {
            fold<T, A>(px, L, kernels::AbsReducer<A>{}, nullptr, acc, outs);
          } else if (std::isinf(p)) {
            fold<T, A>(px, L, kernels::MaxAbsReducer<A>{}, nullptr, acc, outs);
          } else {
            fold<T, A>(px, L, kernels::AbsPowReducer<A>{static_cast<A>(p)}, nullptr, acc, outs);
            for (int64_t o = 0; o < outs; ++o) acc[o] = std::pow(acc[o], static_cast<A>(1.0 / p));
          }
          break;
        }
      }
    } else {
      switch (op) {
        case ReduceOp::sum: fold<T, A>(px, L, kernels::SumReducer<A>{}, nullptr, acc, outs); break;
        case ReduceOp::max: fold<T, A>(px, L, kernels::MaxReducer<A>{}, nullptr, acc, outs); break;
        case ReduceOp::min: fold<T, A>(px, L, kernels::MinReducer<A>{}, nullptr, acc, outs); break;
        default: throw DTypeError("reduce: mean, var and norm need a floating tensor, got " + std::string(to_string(x.dtype())));
      }
    }
    store(acc, out);
  });
}

void arg_reduce(ArgReduceOp op, const Tensor& x_in, int axis, const Tensor& out) {
  const Tensor x = x_in.is_contiguous() ? x_in : contiguous_copy(x_in);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.shape()[d];
  for (int d = axis + 1; d < x.ndim(); ++d) inner *= x.shape()[d];
  const int64_t n = x.ndim() == 0 ? 1 : x.shape()[axis];
  int64_t* idx = static_cast<int64_t*>(out.raw_data());
  const bool want_max = op == ArgReduceOp::max;
  visit_dtype(x.dtype(), [&]<class T>() {
    using C = kernels::compute_t<T>;
    const T* px = x.data<T>();
    // v beats the best so far: strictly better, or the first NaN (bitwise
    // operators keep it branch-free for the column loop).
    auto beats = [want_max](C v, C best) {
      return ((want_max ? v > best : v < best) | ((v != v) & (best == best)));
    };
    const int64_t grain = outer * n * inner < kernels::kParallelGrain ? outer + 1 : 1;
    kernels::parallel_for(outer, grain, [&](int64_t b, int64_t e) {
      std::vector<C> best(inner > 1 ? static_cast<size_t>(inner) : 0);
      // 16-bit rows are converted block-wise first: clang cannot vectorise
      // float16's scalar conversion inside the column loop.
      std::vector<float> conv(detail::is_16bit_float<T> && inner > 1 ? static_cast<size_t>(inner) : 0);
      for (int64_t o = b; o < e; ++o) {
        const T* base = px + o * n * inner;
        int64_t* dst = idx + o * inner;
        if (inner == 1) {
          C bv = kernels::cast<C>(base[0]);
          int64_t bi = 0;
          for (int64_t r = 1; r < n && bv == bv; ++r) {
            const C v = kernels::cast<C>(base[r]);
            if (beats(v, bv)) bv = v, bi = r;
          }
          dst[0] = bi;
          continue;
        }
        for (int64_t i = 0; i < inner; ++i) best[i] = kernels::cast<C>(base[i]), dst[i] = 0;
        auto take_row = [&](const auto* row, int64_t r) {
#pragma omp simd
          for (int64_t i = 0; i < inner; ++i) {
            const C v = kernels::cast<C>(row[i]);
            const bool take = beats(v, best[i]);
            best[i] = take ? v : best[i];
            dst[i] = take ? r : dst[i];
          }
        };
        for (int64_t r = 1; r < n; ++r) {
          const T* row = base + r * inner;
          if constexpr (detail::is_16bit_float<T>) {
            convert(row, conv.data(), inner);
            take_row(conv.data(), r);
          } else {
            take_row(row, r);
          }
        }
      }
    });
  });
}

void put_along_last_axis(const Tensor& values, const Tensor& index, const Tensor& dst) {
  const int64_t rows = index.numel();
  const int64_t width = dst.numel() / std::max<int64_t>(rows, 1);
  const int64_t* pi = index.data<int64_t>();
  visit_dtype(dst.dtype(), [&]<class T>() {
    const T* pv = values.data<T>();
    T* pd = static_cast<T*>(dst.raw_data());
    for (int64_t k = 0; k < rows; ++k) pd[k * width + pi[k]] = pv[k];
  });
}

void var_grad(const Tensor& grad, const Tensor& x, const Tensor& mean, double scale, const Tensor& dx) {
  visit_floating(dx.dtype(), "var_grad", [&]<class T>() {
    using C = kernels::compute_t<T>;
    detail::map<T, T, 3>(dx, {Operand(grad), Operand(x), Operand(mean)}, kernels::VarGrad<C>{static_cast<C>(scale)});
  });
}

void norm_grad(const Tensor& grad, const Tensor& x, const Tensor& norm, double p, const Tensor& dx) {
  visit_floating(dx.dtype(), "norm_grad", [&]<class T>() {
    using C = kernels::compute_t<T>;
    detail::map<T, T, 3>(dx, {Operand(grad), Operand(x), Operand(norm)}, kernels::NormGrad<C>{static_cast<C>(p)});
  });
}

void sum_channels(const Tensor& x_in, int64_t outer, int64_t channels, int64_t inner, const Tensor& out) {
  const Tensor x = x_in.contiguous();
  visit_floating(x.dtype(), "sum_channels", [&]<class T>() { sum_channels_typed<T>(x, outer, channels, inner, out); });
}

// prod along one axis, and its gradient: the lines of the [outer, axis,
// inner] view walked by (outer, block of inner) tasks (cpu/line_blocks.hpp).
void prod(const Tensor& x, Axis3 a, const Tensor& out) {
  visit_floating(out.dtype(), "prod", [&]<class T>() {
    using C = kernels::compute_t<T>;
    const T* px = x.data<T>();
    T* po = static_cast<T*>(out.raw_data());
    for_line_blocks(a.outer, a.inner, x.numel(), [&](int64_t o, int64_t i0, int64_t i1) {
      C acc[kLineBlock];
      std::fill(acc, acc + (i1 - i0), C(1));
      for (int64_t k = 0; k < a.axis; ++k) {
        const T* row = px + (o * a.axis + k) * a.inner;
        for (int64_t i = i0; i < i1; ++i) acc[i - i0] *= kernels::cast<C>(row[i]);
      }
      for (int64_t i = i0; i < i1; ++i) po[o * a.inner + i] = kernels::cast<T>(acc[i - i0]);
    });
  });
}

// The product of the other elements as prefix * suffix products: exact
// with any number of zeros in the line, where g * prod / x is not.
void prod_grad(const Tensor& g, const Tensor& x, Axis3 a, const Tensor& dx) {
  visit_floating(dx.dtype(), "prod_grad", [&]<class T>() {
    using C = kernels::compute_t<T>;
    const T* px = x.data<T>();
    const T* pg = g.data<T>();
    T* pd = static_cast<T*>(dx.raw_data());
    for_line_blocks(a.outer, a.inner, x.numel(), [&](int64_t o, int64_t i0, int64_t i1) {
      const int64_t w = i1 - i0;
      std::vector<C> prefix(static_cast<size_t>(a.axis * w));
      C run[kLineBlock];
      std::fill(run, run + w, C(1));
      for (int64_t k = 0; k < a.axis; ++k) {
        const T* row = px + (o * a.axis + k) * a.inner;
        for (int64_t i = i0; i < i1; ++i) {
          prefix[static_cast<size_t>(k * w + i - i0)] = run[i - i0];
          run[i - i0] *= kernels::cast<C>(row[i]);
        }
      }
      std::fill(run, run + w, C(1));
      for (int64_t k = a.axis - 1; k >= 0; --k) {
        const int64_t row = (o * a.axis + k) * a.inner;
        for (int64_t i = i0; i < i1; ++i) {
          const C gi = kernels::cast<C>(pg[o * a.inner + i]);
          pd[row + i] = kernels::cast<T>(gi * prefix[static_cast<size_t>(k * w + i - i0)] * run[i - i0]);
          run[i - i0] *= kernels::cast<C>(px[row + i]);
        }
      }
    });
  });
}

}  // namespace mixgrad::backend::cpu

namespace mixgrad::backend {

MIXGRAD_CPU_KERNEL(reduce, cpu::reduce);
MIXGRAD_CPU_KERNEL(arg_reduce, cpu::arg_reduce);
MIXGRAD_CPU_KERNEL(put_along_last_axis, cpu::put_along_last_axis);
MIXGRAD_CPU_KERNEL(var_grad, cpu::var_grad);
MIXGRAD_CPU_KERNEL(norm_grad, cpu::norm_grad);
MIXGRAD_CPU_KERNEL(sum_channels, cpu::sum_channels);
MIXGRAD_CPU_KERNEL(prod, cpu::prod);
MIXGRAD_CPU_KERNEL(prod_grad, cpu::prod_grad);

}  // namespace mixgrad::backend
