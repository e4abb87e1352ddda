// Device-agnostic strided loops over N operands that share one iteration
// shape. Dimensions that can be merged are merged first (so a contiguous
// tensor is one run), then the work is split into runs of the innermost
// dimension and handed to `body(ptrs, strides, n)`; the body sees byte
// pointers and byte strides and does its own typed inner loop, which the
// compiler vectorises when the strides equal the element size.
#pragma once

#include <omp.h>

#include <array>
#include <cstdint>
#include <utility>

#include "mixgrad/shape.hpp"

namespace mixgrad::kernels {

/// Below this many elements a loop runs on the calling thread.
inline constexpr int64_t kParallelGrain = 32768;

template <int N>
struct LoopShape {
  int ndim = 0;
  std::array<int64_t, Shape::kMaxDims> extent{};
  std::array<std::array<int64_t, Shape::kMaxDims>, N> stride{};  // bytes
};

/// The dims in operand 0's memory order (its strides non-increasing, ties
/// kept in order) when it has no stride-0 dim, else in their own: an output
/// laid out channels-last is walked as it lies, like a contiguous one (for
/// which the order is the identity).
template <int N>
std::array<int, Shape::kMaxDims> walk_order(const Shape& shape, const std::array<Shape, N>& byte_strides) {
  std::array<int, Shape::kMaxDims> order{};
  const Shape& s = byte_strides[0];
  bool permute = true;
  for (int d = 0; d < shape.ndim(); ++d) {
    order[d] = d;
    if (shape[d] > 1 && s[d] <= 0) permute = false;
  }
  if (!permute) return order;
  for (int i = 1; i < shape.ndim(); ++i)  // insertion sort: stable, at most 8 dims
    for (int j = i; j > 0 && s[order[j]] > s[order[j - 1]]; --j) std::swap(order[j], order[j - 1]);
  return order;
}

/// shape and byte_strides permuted into walk_order: for loops that write
/// each element of operand 0 once, where the order changes no result.
template <int N>
void permute_to_walk_order(Shape& shape, std::array<Shape, N>& byte_strides) {
  const std::array<int, Shape::kMaxDims> order = walk_order<N>(shape, byte_strides);
  int first_moved = 0;  // the identity (a contiguous output) changes nothing: no copies
  while (first_moved < shape.ndim() && order[first_moved] == first_moved) ++first_moved;
  if (first_moved == shape.ndim()) return;
  const Shape s = shape;
  const std::array<Shape, N> st = byte_strides;
  for (int i = first_moved; i < s.ndim(); ++i) {
    shape[i] = s[order[i]];
    for (int k = 0; k < N; ++k) byte_strides[k][i] = st[k][order[i]];
  }
}

/// Drops extent-1 dimensions and merges dimensions that are contiguous in
/// every operand.
template <int N>
LoopShape<N> coalesce(const Shape& shape, const std::array<Shape, N>& byte_strides) {
  LoopShape<N> ls;
  for (int d = 0; d < shape.ndim(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = ls.ndim > 0;
    for (int k = 0; k < N && merge; ++k)
      merge = ls.stride[k][ls.ndim - 1] == byte_strides[k][d] * shape[d];
    if (merge) {
      ls.extent[ls.ndim - 1] *= shape[d];
      for (int k = 0; k < N; ++k) ls.stride[k][ls.ndim - 1] = byte_strides[k][d];
    } else {
      ls.extent[ls.ndim] = shape[d];
      for (int k = 0; k < N; ++k) ls.stride[k][ls.ndim] = byte_strides[k][d];
      ++ls.ndim;
    }
  }
  if (ls.ndim == 0) {  // a scalar: one run of one element
    ls.ndim = 1;
    ls.extent[0] = 1;
    for (int k = 0; k < N; ++k) ls.stride[k][0] = 0;
  }
  return ls;
}

/// Runs [r0, r1) of ls (row-major over its outer dimensions), elements
/// [i0, i1) of each: every run, or a slice of the one long run that
/// for_each_run splits across threads. The one place `body` is inlined
/// (noinline itself): the serial walk and both parallel splits call it, so
/// each loop's body is compiled once, not once per call site.
template <int N, class Body>
[[gnu::noinline]] void run_runs(const LoopShape<N>& ls, const std::array<char*, N>& base, Body& body, int64_t r0,
                                int64_t r1, int64_t i0, int64_t i1) {
  const int last = ls.ndim - 1;
  std::array<int64_t, N> inner_stride;
  for (int k = 0; k < N; ++k) inner_stride[k] = ls.stride[k][last];
  // pointer of run r0
  std::array<int64_t, Shape::kMaxDims> idx{};
  int64_t r = r0;
  for (int d = last - 1; d >= 0; --d) {
    idx[d] = r % ls.extent[d];
    r /= ls.extent[d];
  }
  std::array<char*, N> p;
  for (int k = 0; k < N; ++k) {
    p[k] = base[k] + i0 * inner_stride[k];
    for (int d = 0; d < last; ++d) p[k] += idx[d] * ls.stride[k][d];
  }
  for (int64_t run = r0; run < r1; ++run) {
    body(p, inner_stride, i1 - i0);
    for (int d = last - 1; d >= 0; --d) {  // odometer step
      for (int k = 0; k < N; ++k) p[k] += ls.stride[k][d];
      if (++idx[d] < ls.extent[d]) break;
      for (int k = 0; k < N; ++k) p[k] -= ls.stride[k][d] * ls.extent[d];
      idx[d] = 0;
    }
  }
}

/// Runs `body(std::array<char*, N> ptrs, const std::array<int64_t, N>& inner_stride, int64_t n)`
/// over every innermost run; runs are split across threads for large loops.
template <int N, class Body>
void for_each_run(const Shape& shape, const std::array<Shape, N>& byte_strides, std::array<char*, N> base,
                  Body&& body) {
  const LoopShape<N> ls = coalesce<N>(shape, byte_strides);
  const int last = ls.ndim - 1;
  const int64_t inner = ls.extent[last];
  int64_t runs = 1;
  for (int d = 0; d < last; ++d) runs *= ls.extent[d];
  if (runs * inner == 0) return;

  const int64_t total = runs * inner;
  if (total < kParallelGrain || omp_get_max_threads() == 1) {
    run_runs<N>(ls, base, body, 0, runs, 0, inner);
    return;
  }
  if (runs == 1) {  // one long run: split it
    const int64_t threads = omp_get_max_threads();
    const int64_t chunk = (inner + threads - 1) / threads;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < threads; ++t) {
      const int64_t b = t * chunk, e = std::min(inner, b + chunk);
      if (b < e) run_runs<N>(ls, base, body, 0, 1, b, e);
    }
    return;
  }
  const int64_t threads = std::min<int64_t>(omp_get_max_threads(), runs);
  const int64_t chunk = (runs + threads - 1) / threads;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < threads; ++t) {
    const int64_t b = t * chunk, e = std::min(runs, b + chunk);
    if (b < e) run_runs<N>(ls, base, body, b, e, 0, inner);
  }
}

/// Parallel loop over [0, n) in contiguous chunks: `body(begin, end)`.
template <class Body>
void parallel_for(int64_t n, int64_t grain, Body&& body) {
  const int threads = omp_get_max_threads();
  if (n < grain || threads == 1) {
    if (n > 0) body(int64_t{0}, n);
    return;
  }
  const int64_t chunk = (n + threads - 1) / threads;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < threads; ++t) {
    const int64_t b = t * chunk, e = std::min(n, b + chunk);
    if (b < e) body(b, e);
  }
}

}  // namespace mixgrad::kernels
