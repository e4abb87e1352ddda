// CPU sorting kernel: each line along the axis is copied into a buffer of
// compute values (float for the 16-bit types), its positions are ordered by
// a strict total order (value, NaN above every number, then position), and
// the first k are written out. Ordering by position among equals makes
// std::partial_sort (topk) and std::sort give the stable sort's answer, so
// the result is the same on every run and thread count. Lines are split
// across threads, each with its own buffers.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>
#include <vector>

#include "backend/sorting.hpp"
#include "kernels/cast.hpp"

namespace mixgrad::backend::cpu {

namespace {

constexpr int64_t kParallelWork = 1 << 14;

template <class C>
bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>)
    return std::isnan(v);
  else
    return false;
}

template <class T>
void sort_lines_typed(const Tensor& x, Axis3 a, int64_t k, bool descending, const Tensor& values,
                      const Tensor& indices) {
  using C = kernels::compute_t<T>;
  const T* px = x.data<T>();
  T* pv = static_cast<T*>(values.raw_data());
  auto* pi = static_cast<int64_t*>(indices.raw_data());
  const int64_t n = a.axis;
  const int64_t lines = a.outer * a.inner;
  if (lines == 0 || k == 0) return;
  const bool parallel = lines > 1 && lines * n >= kParallelWork;
#pragma omp parallel if (parallel)
  {
    std::vector<C> line(static_cast<size_t>(n));
    std::vector<int64_t> order(static_cast<size_t>(n));
#pragma omp for schedule(static)
    for (int64_t l = 0; l < lines; ++l) {
      const int64_t o = l / a.inner;
      const int64_t i = l % a.inner;
      const T* src = px + o * n * a.inner + i;
      for (int64_t j = 0; j < n; ++j) line[j] = kernels::cast<C>(src[j * a.inner]);
      std::iota(order.begin(), order.end(), int64_t{0});
      // "p comes before q": NaN is the largest value, equal values (two NaNs
      // included) keep their input order.
      auto before = [&](int64_t p, int64_t q) {
        const C vp = line[p], vq = line[q];
        const bool np = is_nan(vp), nq = is_nan(vq);
        if (np || nq) {
          if (np && nq) return p < q;
          return descending ? np : nq;
        }
        if (vp != vq) return descending ? vp > vq : vp < vq;
        return p < q;
      };
      if (k < n)
        std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
      else
        std::sort(order.begin(), order.end(), before);
      T* dv = pv + o * k * a.inner + i;
      int64_t* di = pi + o * k * a.inner + i;
      for (int64_t j = 0; j < k; ++j) {
        dv[j * a.inner] = src[order[j] * a.inner];
        di[j * a.inner] = order[j];
      }
    }
  }
}

}  // namespace

void sort_lines(const Tensor& x, Axis3 a, int64_t k, bool descending, const Tensor& values, const Tensor& indices) {
  visit_dtype(x.dtype(), [&]<class T>() { sort_lines_typed<T>(x, a, k, descending, values, indices); });
}

}  // namespace mixgrad::backend::cpu

namespace mixgrad::backend {

MIXGRAD_CPU_KERNEL(sort_lines, cpu::sort_lines);

}  // namespace mixgrad::backend
