// CPU multi-tensor kernels for gradient scaling and clipping. The CPU is the
// device here: reading the one-element flag / factor / norm tensors is a
// plain load, no synchronisation.
//
// A list of gradients is flattened into runs (a contiguous tensor is one run;
// a strided one is one run per innermost row), and the total element count
// is split evenly between the OpenMP threads, whatever the sizes of the
// individual tensors: 200 tensors of one size or one huge and many tiny all
// balance the same. Each thread walks the runs its share overlaps, so one
// parallel region covers the whole list (no per-tensor fork/join).
//
// Inner loops: float and double are scaled and checked in one vectorised
// loop (the non-finite flag is an OR of exponent-bit compares); 16-bit
// grads go through a small float block in L1 with the bulk F16C / bfloat16
// converters, so the 16-bit <-> float rounding is the same as everywhere
// else in mixgrad.
#include "backend/multi_tensor.hpp"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "backend/copy.hpp"
#include "kernels/grad_scaling.hpp"
#include "kernels/loops.hpp"

namespace mixgrad::backend::cpu {

namespace {

struct Run {
  char* ptr;
  int64_t n;
  int64_t stride;  // bytes between elements
  DType dtype;
};

void append_runs(const Tensor& t, std::vector<Run>& runs) {
  if (t.numel() == 0) return;
  const kernels::LoopShape<1> ls = kernels::coalesce<1>(t.shape(), {byte_strides(t)});
  const int last = ls.ndim - 1;
  int64_t outer = 1;
  for (int d = 0; d < last; ++d) outer *= ls.extent[d];
  char* base = static_cast<char*>(t.raw_data());
  for (int64_t r = 0; r < outer; ++r) {
    int64_t rem = r, off = 0;
    for (int d = last - 1; d >= 0; --d) {
      off += (rem % ls.extent[d]) * ls.stride[0][d];
      rem /= ls.extent[d];
    }
    runs.push_back({base + off, ls.extent[last], ls.stride[0][last], t.dtype()});
  }
}

std::vector<Run> build_runs(std::span<const Tensor> tensors, const char* op) {
  std::vector<Run> runs;
  runs.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    if (!is_floating_point(t.dtype()))
      throw DTypeError(std::string(op) + ": expected floating tensors, got " + std::string(to_string(t.dtype())));
    append_runs(t, runs);
  }
  return runs;
}

// Calls fn(run, begin, end) -> R on each thread's equal share of all
// elements and combines the partial results in thread order (deterministic
// for a given thread count).
template <class R, class Fn, class Combine>
R reduce_runs(const std::vector<Run>& runs, R init, Fn&& fn, Combine&& combine) {
  std::vector<int64_t> start(runs.size() + 1, 0);
  for (size_t i = 0; i < runs.size(); ++i) start[i + 1] = start[i] + runs[i].n;
  const int64_t total = start.back();
  const int threads = total < kernels::kParallelGrain ? 1 : std::max(1, omp_get_max_threads());
  std::vector<R> partial(threads, init);
  auto work = [&](int t) {
    const int64_t lo = total / threads * t + std::min<int64_t>(t, total % threads);
    const int64_t hi = lo + total / threads + (t < total % threads ? 1 : 0);
    size_t i = static_cast<size_t>(std::upper_bound(start.begin(), start.end(), lo) - start.begin()) - 1;
    R acc = init;
    for (; i < runs.size() && start[i] < hi; ++i) {
      const int64_t b = std::max(lo, start[i]) - start[i];
      const int64_t e = std::min(hi, start[i + 1]) - start[i];
      if (b < e) acc = combine(acc, fn(runs[i], b, e));
    }
    partial[t] = acc;
  };
  if (threads == 1) {
    work(0);
  } else {
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int t = 0; t < threads; ++t) work(t);
  }
  R out = init;
  for (const R& p : partial) out = combine(out, p);
  return out;
}

// ---- scale and check ------------------------------------------------------

template <class T>  // float or double, contiguous
bool scale_check_wide(T* p, int64_t n, T factor) {
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  constexpr Bits kExp = sizeof(T) == 4 ? Bits{kernels::kFloatExponent} : Bits(kernels::kDoubleExponent);
  Bits bad = 0;
#pragma omp simd reduction(| : bad)
  for (int64_t i = 0; i < n; ++i) {
    const T r = p[i] * factor;
    p[i] = r;
    bad |= static_cast<Bits>((std::bit_cast<Bits>(r) & kExp) == kExp);
  }
  return bad != 0;
}

template <class T>  // half or bfloat16, contiguous
bool scale_check_narrow(T* p, int64_t n, float factor) {
  constexpr int64_t kBlock = 1024;
  constexpr uint16_t kExp = std::is_same_v<T, half> ? kernels::kHalfExponent : kernels::kBfloat16Exponent;
  alignas(64) float buf[kBlock];
  uint32_t bad = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = std::min(kBlock, n - b);
    convert(p + b, buf, m);
#pragma omp simd
    for (int64_t i = 0; i < m; ++i) buf[i] *= factor;
    convert(buf, p + b, m);
    const uint16_t* bits = reinterpret_cast<const uint16_t*>(p + b);
#pragma omp simd reduction(| : bad)
    for (int64_t i = 0; i < m; ++i) bad |= static_cast<uint32_t>((bits[i] & kExp) == kExp);
  }
  return bad != 0;
}

template <class T>
bool scale_check_run(const Run& r, int64_t b, int64_t e, double factor) {
  const kernels::ScaleCheck<T> op{kernels::applied_factor<T>(factor)};
  if (r.stride == static_cast<int64_t>(sizeof(T))) {
    T* p = reinterpret_cast<T*>(r.ptr) + b;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) return scale_check_wide<T>(p, e - b, op.factor);
    else return scale_check_narrow<T>(p, e - b, op.factor);
  }
  bool bad = false;
  for (int64_t i = b; i < e; ++i) bad |= op(*reinterpret_cast<T*>(r.ptr + i * r.stride));
  return bad;
}

// ---- check only (for an unscale fused into the optimizer) -----------------

template <class T>
bool check_run(const Run& r, int64_t b, int64_t e, double factor) {
  const kernels::ProductCheck<T> op{kernels::applied_factor<T>(factor)};
  using C = kernels::compute_t<T>;
  using Bits = std::conditional_t<sizeof(C) == 4, uint32_t, uint64_t>;
  constexpr Bits kExp = sizeof(C) == 4 ? Bits{kernels::kFloatExponent} : Bits(kernels::kDoubleExponent);
  if (r.stride == static_cast<int64_t>(sizeof(T))) {
    const T* p = reinterpret_cast<const T*>(r.ptr) + b;
    const int64_t n = e - b;
    Bits bad = 0;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
#pragma omp simd reduction(| : bad)
      for (int64_t i = 0; i < n; ++i) bad |= static_cast<Bits>((std::bit_cast<Bits>(p[i] * op.factor) & kExp) == kExp);
    } else {
      constexpr int64_t kBlock = 1024;
      alignas(64) float buf[kBlock];
      for (int64_t k = 0; k < n; k += kBlock) {
        const int64_t m = std::min(kBlock, n - k);
        convert(p + k, buf, m);
#pragma omp simd reduction(| : bad)
        for (int64_t i = 0; i < m; ++i) bad |= static_cast<Bits>((std::bit_cast<Bits>(buf[i] * op.factor) & kExp) == kExp);
      }
    }
    return bad != 0;
  }
  bool bad = false;
  for (int64_t i = b; i < e; ++i) bad |= op(*reinterpret_cast<const T*>(r.ptr + i * r.stride));
  return bad;
}

// ---- norms ----------------------------------------------------------------

enum class NormKind { one, two, general, max };

struct NormAcc {
  double sum = 0.0;   // sum of |x / divisor|^p
  double amax = 0.0;  // largest |x| (NaNs not ordered: see nan)
  bool nan = false;
};

NormAcc combine_norm(const NormAcc& a, const NormAcc& b) {
  return {a.sum + b.sum, std::max(a.amax, b.amax), a.nan || b.nan};
}

template <NormKind K, class T>  // float or double elements, contiguous
NormAcc norm_contiguous(const T* x, int64_t n, const kernels::NormTerm& term) {
  double sum = 0.0, amax = 0.0;
  uint32_t nan = 0;
  const double inv = term.inv_divisor;
  if constexpr (K == NormKind::max) {
#pragma omp simd reduction(max : amax) reduction(| : nan)
    for (int64_t i = 0; i < n; ++i) {
      const double a = std::fabs(static_cast<double>(x[i]));
      amax = a > amax ? a : amax;
      nan |= static_cast<uint32_t>(kernels::is_nan(x[i]));
    }
  } else if constexpr (K == NormKind::general) {
    for (int64_t i = 0; i < n; ++i) {
      const double a = std::fabs(static_cast<double>(x[i]));
      amax = a > amax ? a : amax;
      sum += term(a);
    }
  } else {
#pragma omp simd reduction(+ : sum) reduction(max : amax)
    for (int64_t i = 0; i < n; ++i) {
      const double a = std::fabs(static_cast<double>(x[i]));
      amax = a > amax ? a : amax;
      const double s = a * inv;
      if constexpr (K == NormKind::two) sum += s * s;
      else sum += s;
    }
  }
  return {sum, amax, nan != 0};
}

template <NormKind K, class T>
NormAcc norm_run(const Run& r, int64_t b, int64_t e, const kernels::NormTerm& term) {
  if (r.stride == static_cast<int64_t>(sizeof(T))) {
    const T* p = reinterpret_cast<const T*>(r.ptr) + b;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      return norm_contiguous<K, T>(p, e - b, term);
    } else {
      constexpr int64_t kBlock = 1024;
      alignas(64) float buf[kBlock];
      NormAcc acc;
      for (int64_t i = 0; i < e - b; i += kBlock) {
        const int64_t m = std::min(kBlock, e - b - i);
        convert(p + i, buf, m);
        acc = combine_norm(acc, norm_contiguous<K, float>(buf, m, term));
      }
      return acc;
    }
  }
  NormAcc acc;
  for (int64_t i = b; i < e; ++i) {
    const double v = kernels::cast<double>(*reinterpret_cast<const T*>(r.ptr + i * r.stride));
    const double a = std::fabs(v);
    acc.amax = std::max(acc.amax, a);
    acc.nan = acc.nan || kernels::is_nan(v);
    if constexpr (K != NormKind::max) acc.sum += term(v);
  }
  return acc;
}

template <NormKind K>
NormAcc norm_pass(const std::vector<Run>& runs, const kernels::NormTerm& term) {
  return reduce_runs(
      runs, NormAcc{},
      [&](const Run& r, int64_t b, int64_t e) {
        return visit_floating(r.dtype, "grad_norm", [&]<class T>() { return norm_run<K, T>(r, b, e, term); });
      },
      combine_norm);
}

NormAcc norm_pass(NormKind kind, const std::vector<Run>& runs, const kernels::NormTerm& term) {
  switch (kind) {
    case NormKind::one: return norm_pass<NormKind::one>(runs, term);
    case NormKind::two: return norm_pass<NormKind::two>(runs, term);
    case NormKind::general: return norm_pass<NormKind::general>(runs, term);
    case NormKind::max: return norm_pass<NormKind::max>(runs, term);
  }
  return {};
}

bool scale_pass(const std::vector<Run>& runs, double factor, const char* op) {
  return reduce_runs(
      runs, false,
      [factor, op](const Run& r, int64_t b, int64_t e) {
        return visit_floating(r.dtype, op, [&]<class T>() { return scale_check_run<T>(r, b, e, factor); });
      },
      [](bool a, bool b) { return a || b; });
}

double norm_value(const std::vector<Run>& runs, double norm_type) {
  const NormKind kind = std::isinf(norm_type)  ? NormKind::max
                        : norm_type == 2.0     ? NormKind::two
                        : norm_type == 1.0     ? NormKind::one
                                               : NormKind::general;
  const NormAcc acc = norm_pass(kind, runs, kernels::NormTerm{norm_type, 1.0});
  if (acc.nan || std::isnan(acc.sum)) return std::numeric_limits<double>::quiet_NaN();
  if (kind == NormKind::max || std::isinf(acc.amax)) return acc.amax;
  auto root = [&](double s) { return kind == NormKind::two ? std::sqrt(s) : kind == NormKind::one ? s : std::pow(s, 1.0 / norm_type); };
  // The sum of |x|^p left double's range although every |x| is finite (huge
  // float64 grads, or tiny ones whose powers underflow): redo it in units of
  // a power of two near the largest |x|, which is exact to divide by.
  constexpr double kTiny = 0x1p-960;
  if (acc.amax > 0.0 && (std::isinf(acc.sum) || acc.sum < kTiny)) {
    const int k = std::clamp(-std::ilogb(acc.amax), -1020, 1020);
    const double inv = std::ldexp(1.0, k);
    const NormAcc scaled = norm_pass(kind, runs, kernels::NormTerm{norm_type, inv});
    return root(scaled.sum) / inv;
  }
  return root(acc.sum);
}

// The value of a one-element float32 / float64 tensor.
double scalar_value(const Tensor& t) {
  return t.dtype() == DType::float64 ? *static_cast<const double*>(t.raw_data())
                                     : static_cast<double>(*static_cast<const float*>(t.raw_data()));
}

}  // namespace

void non_finite_check_and_unscale(std::span<const Tensor> tensors, const Tensor& found_inf, const Tensor& inv_scale) {
  constexpr const char* op = "non_finite_check_and_unscale";
  const double factor = scalar_value(inv_scale);
  bool in_float = false;
  for (const Tensor& t : tensors) in_float = in_float || t.dtype() != DType::float64;
  if (!std::isfinite(factor) || (in_float && !std::isfinite(static_cast<float>(factor)))) {
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", factor);
    throw ValueError(std::string(op) + ": inv_scale " + text + " is not finite in " +
                     (in_float ? "float" : "double") + " arithmetic");
  }
  const std::vector<Run> runs = build_runs(tensors, op);
  if (scale_pass(runs, factor, op)) *static_cast<float*>(found_inf.raw_data()) = 1.0f;
}

void non_finite_check(std::span<const Tensor> tensors, const Tensor& found_inf, const Tensor& inv_scale) {
  // static: the lambda below reads it without a capture under every compiler.
  static constexpr const char* op = "non_finite_check";
  const double factor = scalar_value(inv_scale);
  const std::vector<Run> runs = build_runs(tensors, op);
  const bool bad = reduce_runs(
      runs, false,
      [factor](const Run& r, int64_t b, int64_t e) {
        return visit_floating(r.dtype, op, [&]<class T>() { return check_run<T>(r, b, e, factor); });
      },
      [](bool a, bool b) { return a || b; });
  if (bad) *static_cast<float*>(found_inf.raw_data()) = 1.0f;
}

void grad_norm(std::span<const Tensor> tensors, double norm_type, const Tensor& out) {
  *static_cast<double*>(out.raw_data()) = norm_value(build_runs(tensors, "grad_norm"), norm_type);
}

void clip_by_norm(std::span<const Tensor> tensors, const Tensor& norm, double max_norm) {
  const double n = scalar_value(norm);
  // Non-finite norms leave the grads alone: scaling by max_norm / inf would
  // zero the finite ones and hide the overflow from whoever checks next.
  if (!std::isfinite(n) || !(n > max_norm)) return;
  scale_pass(build_runs(tensors, "clip_by_norm"), max_norm / n, "clip_by_norm");
}

}  // namespace mixgrad::backend::cpu

namespace mixgrad::backend {

MIXGRAD_CPU_KERNEL(non_finite_check_and_unscale_kernel, cpu::non_finite_check_and_unscale);
MIXGRAD_CPU_KERNEL(non_finite_check_kernel, cpu::non_finite_check);
MIXGRAD_CPU_KERNEL(grad_norm_kernel, cpu::grad_norm);
MIXGRAD_CPU_KERNEL(clip_by_norm_kernel, cpu::clip_by_norm);

}  // namespace mixgrad::backend
