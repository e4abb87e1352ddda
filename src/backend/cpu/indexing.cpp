// CPU indexing kernels.
//
// Tensors arrive contiguous (the ops make dense copies; gather reads its
// input through its strides), so an op along an axis sees [outer, axis,
// inner] and its inner loop runs over `inner` with unit stride. Gathers split
// their rows across threads; the scatters (index_add, scatter_add) split over (outer, block of inner) pairs, or for an embedding
// gradient over ranges of destination rows, whose destinations never
// overlap, so repeated indices accumulate without atomics and in the same
// order on every run.
// 16-bit values are added and multiplied in float and rounded once per store.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/line_blocks.hpp"
#include "backend/indexing.hpp"
#include "kernels/cast.hpp"

namespace mixgrad::backend::cpu {

namespace {

using kernels::cast;
using kernels::compute_t;

/// Accumulator type: float for the 16-bit types and float32, double for
/// float64, the type itself for integers.
template <class T>
using acc_t = compute_t<T>;

/// Element offsets into x of the leading (before `axis`) and trailing
/// (after `axis`) coordinates of a tensor of shape `s`, row-major.
void coordinate_offsets(const Shape& s, const Shape& x_strides, int axis, std::vector<int64_t>& lead,
                        std::vector<int64_t>& trail) {
  auto fill = [&](int from, int to, std::vector<int64_t>& out) {
    int64_t n = 1;
    for (int d = from; d < to; ++d) n *= s[d];
    out.assign(static_cast<size_t>(n), 0);
    for (int64_t k = 0; k < n; ++k) {
      int64_t rem = k, off = 0;
      for (int d = to - 1; d >= from; --d) {
        off += (rem % s[d]) * x_strides[d];
        rem /= s[d];
      }
      out[static_cast<size_t>(k)] = off;
    }
  };
  fill(0, axis, lead);
  fill(axis + 1, s.ndim(), trail);
}

}  // namespace

void index_select(const Tensor& x, Axis3 a, const Tensor& index, const Tensor& out) {
  const int64_t k_count = index.numel();
  const int64_t* idx = index.data<int64_t>();
  const size_t row_bytes = static_cast<size_t>(a.inner) * element_size(x.dtype());
  const auto* px = static_cast<const std::byte*>(x.raw_data());
  auto* po = static_cast<std::byte*>(out.raw_data());
  const int64_t rows = a.outer * k_count;
#pragma omp parallel for schedule(static) if (rows * a.inner > kParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t o = r / k_count, k = r % k_count;
    std::memcpy(po + static_cast<size_t>(r) * row_bytes,
                px + static_cast<size_t>(o * a.axis + idx[k]) * row_bytes, row_bytes);
  }
}

void index_add(const Tensor& src, Axis3 a, const Tensor& index, const Tensor& out) {
  const int64_t k_count = index.numel();
  const int64_t* idx = index.data<int64_t>();
  visit_dtype(out.dtype(), [&]<class T>() {
    const T* ps = src.data<T>();
    T* po = static_cast<T*>(out.raw_data());
    const int64_t blocks = (a.inner + kLineBlock - 1) / kLineBlock;
    if (a.outer * blocks < omp_get_max_threads() && src.numel() > kParallelWork && a.axis > 1) {
      // An embedding table's gradient (outer 1, a narrow row): each thread
      // owns a range of destination rows and takes the indices that land in
      // it, so the threads still never share a destination.
#pragma omp parallel
      {
        const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
        const int64_t r0 = a.axis * t / nt, r1 = a.axis * (t + 1) / nt;
        for (int64_t o = 0; o < a.outer; ++o)
          for (int64_t k = 0; k < k_count; ++k) {
            if (idx[k] < r0 || idx[k] >= r1) continue;
            const T* s = ps + (o * k_count + k) * a.inner;
            T* d = po + (o * a.axis + idx[k]) * a.inner;
            for (int64_t i = 0; i < a.inner; ++i) d[i] = cast<T>(cast<acc_t<T>>(d[i]) + cast<acc_t<T>>(s[i]));
          }
      }
      return;
    }
    for_line_blocks(a.outer, a.inner, src.numel(), [&](int64_t o, int64_t i0, int64_t i1) {
      for (int64_t k = 0; k < k_count; ++k) {
        const T* s = ps + (o * k_count + k) * a.inner;
        T* d = po + (o * a.axis + idx[k]) * a.inner;
        for (int64_t i = i0; i < i1; ++i) d[i] = cast<T>(cast<acc_t<T>>(d[i]) + cast<acc_t<T>>(s[i]));
      }
    });
  });
}

void gather(const Tensor& x, int axis, const Tensor& index, const Tensor& out) {
  const Shape& s = index.shape();
  std::vector<int64_t> lead, trail;
  coordinate_offsets(s, x.strides(), axis, lead, trail);
  const int64_t k_count = s[axis], inner = static_cast<int64_t>(trail.size());
  const int64_t rows = static_cast<int64_t>(lead.size()) * k_count;
  const int64_t stride = x.strides()[axis];
  const int64_t* idx = index.data<int64_t>();
  visit_dtype(out.dtype(), [&]<class T>() {
    const T* px = x.data<T>();
    T* po = static_cast<T*>(out.raw_data());
#pragma omp parallel for schedule(static) if (rows * inner > kParallelWork)
    for (int64_t r = 0; r < rows; ++r) {
      const T* base = px + lead[static_cast<size_t>(r / k_count)];
      const int64_t* ir = idx + r * inner;
      T* orow = po + r * inner;
      for (int64_t i = 0; i < inner; ++i) orow[i] = base[ir[i] * stride + trail[static_cast<size_t>(i)]];
    }
  });
}

void scatter_add(const Tensor& src, int axis, const Tensor& index, const Tensor& out) {
  const Shape& s = index.shape();
  std::vector<int64_t> lead, trail;
  coordinate_offsets(s, out.strides(), axis, lead, trail);
  const int64_t k_count = s[axis], inner = static_cast<int64_t>(trail.size());
  const int64_t outer = static_cast<int64_t>(lead.size());
  const int64_t stride = out.strides()[axis];
  const int64_t* idx = index.data<int64_t>();
  visit_dtype(out.dtype(), [&]<class T>() {
    const T* ps = src.data<T>();
    T* po = static_cast<T*>(out.raw_data());
    for_line_blocks(outer, inner, index.numel(), [&](int64_t o, int64_t i0, int64_t i1) {
      T* base = po + lead[static_cast<size_t>(o)];
      for (int64_t k = 0; k < k_count; ++k) {
        const int64_t row = (o * k_count + k) * inner;
        for (int64_t i = i0; i < i1; ++i) {
          T& d = base[idx[row + i] * stride + trail[static_cast<size_t>(i)]];
          d = cast<T>(cast<acc_t<T>>(d) + cast<acc_t<T>>(ps[row + i]));
        }
      }
    });
  });
}

// Rows in index order (a repeated destination row keeps the last one, or
// sums them all with accumulate); the work inside a row is split across
// threads, never the row order, so the result is the same on every run.
void index_put_rows(std::span<const Tensor> indices, const Shape& extents, const std::string& x_desc,
                    const Tensor& rows) {
  const int64_t m_count = rows.numel();
  int64_t* pr = static_cast<int64_t*>(rows.raw_data());
  std::fill(pr, pr + m_count, int64_t{0});
  for (size_t j = 0; j < indices.size(); ++j) {
    const int64_t extent = extents[static_cast<int>(j)];
    const int64_t* pi = indices[j].data<int64_t>();
    for (int64_t m = 0; m < m_count; ++m) {
      int64_t v = pi[m];
      if (v < -extent || v >= extent)
        throw ValueError("index_put: index " + std::to_string(v) + " is out of range for dimension " +
                         std::to_string(j) + " of " + x_desc + " (valid: " + std::to_string(-extent) + " to " +
                         std::to_string(extent - 1) + ")");
      if (v < 0) v += extent;
      pr[m] = pr[m] * extent + v;
    }
  }
}

void index_put(const Tensor& values, const Tensor& rows, bool accumulate, const Tensor& out) {
  const int64_t m_count = rows.numel();
  const int64_t inner = m_count == 0 ? 0 : values.numel() / m_count;
  const int64_t* idx = rows.data<int64_t>();
  if (!accumulate) {
    const size_t row_bytes = static_cast<size_t>(inner) * element_size(out.dtype());
    const auto* pv = static_cast<const std::byte*>(values.raw_data());
    auto* po = static_cast<std::byte*>(out.raw_data());
    for (int64_t m = 0; m < m_count; ++m)
      std::memcpy(po + static_cast<size_t>(idx[m]) * row_bytes, pv + static_cast<size_t>(m) * row_bytes, row_bytes);
    return;
  }
  visit_dtype(out.dtype(), [&]<class T>() {
    const T* pv = values.data<T>();
    T* po = static_cast<T*>(out.raw_data());
    for_line_blocks(1, inner, values.numel(), [&](int64_t, int64_t i0, int64_t i1) {
      for (int64_t m = 0; m < m_count; ++m) {
        const T* s = pv + m * inner;
        T* d = po + idx[m] * inner;
        for (int64_t i = i0; i < i1; ++i) d[i] = cast<T>(cast<acc_t<T>>(d[i]) + cast<acc_t<T>>(s[i]));
      }
    });
  });
}

void check_indices(const char* op, const Tensor& index, int64_t extent, const std::string& what) {
  const int64_t* p = index.data<int64_t>();
  const int64_t n = index.numel();
  for (int64_t k = 0; k < n; ++k)
    if (p[k] < 0 || p[k] >= extent)
      throw ValueError(std::string(op) + ": index " + std::to_string(p[k]) + " is out of range for " + what +
                       " (valid: 0 to " + std::to_string(extent - 1) + ")");
}

}  // namespace mixgrad::backend::cpu

namespace mixgrad::backend {

MIXGRAD_CPU_KERNEL(check_indices, cpu::check_indices);
MIXGRAD_CPU_KERNEL(index_select, cpu::index_select);
MIXGRAD_CPU_KERNEL(index_add, cpu::index_add);
MIXGRAD_CPU_KERNEL(gather, cpu::gather);
MIXGRAD_CPU_KERNEL(scatter_add, cpu::scatter_add);
MIXGRAD_CPU_KERNEL(index_put_rows, cpu::index_put_rows);
MIXGRAD_CPU_KERNEL(index_put, cpu::index_put);

}  // namespace mixgrad::backend
