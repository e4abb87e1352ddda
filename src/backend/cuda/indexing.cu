// CUDA indexing kernels (backend/indexing.hpp).
//
// Gathers (index_select, gather) are grid-stride loops over the output.
// index_put computes its rows on the device (cuda_plan::put_row) and, when it
// overwrites, lets the last entry naming a row claim it (an atomicMax) and
// only that entry copy: the CPU's last-write-wins result, deterministically;
// with accumulate it runs index_add's kernels.
// The scatters (index_add, scatter_add) add with atomics in float32 and
// float64 (the order of additions into one destination then varies between
// runs, as in every GPU framework); in the 16-bit and integer dtypes, which
// have no native atomics on our element types, one thread owns each
// destination line and adds the indices in order: deterministic and equal
// to the CPU's result.
//
// Index range: the CPU ops check indices on the host before any output
// exists. Here that would stall the stream, so the kernels skip an
// out-of-range index (no memory is touched through it), record the first
// bad position with an atomicMin, and the status is checked at the device's
// next synchronisation with the host (backend/pending_checks.hpp), which
// then throws the CPU's ValueError.
#include <cuda_runtime_api.h>

#include <climits>
#include <string>

#include "backend/cuda/launch.cuh"
#include "backend/cuda/check.hpp"
#include "backend/cuda/device_ptr.hpp"
#include "backend/cuda/index_plan.hpp"
#include "backend/cuda/plan.hpp"
#include "backend/cuda/stream.hpp"
#include "backend/indexing.hpp"
#include "backend/pending_checks.hpp"
#include "kernels/cast.hpp"

namespace mixgrad::backend::cuda {

namespace {

using kernels::cast;
using kernels::compute_t;

// first_bad null: skip the index without recording it (index_put's rows of
// -1, whose bad index index_put_rows already recorded).
__device__ __forceinline__ bool bad_index(int64_t v, int64_t extent, int64_t pos, unsigned long long* first_bad) {
  if (static_cast<uint64_t>(v) < static_cast<uint64_t>(extent)) return false;
  if (first_bad != nullptr) atomicMin(first_bad, static_cast<unsigned long long>(pos));
  return true;
}

// status = {first bad position or -1, its index value}.
__global__ void index_status_kernel(const int64_t* idx, const unsigned long long* first_bad, int64_t* status) {
  const unsigned long long f = *first_bad;
  const bool bad = f != ULLONG_MAX;
  status[0] = bad ? static_cast<int64_t>(f) : -1;
  status[1] = bad ? idx[f] : 0;
}

/// The first-bad-position word of one call and the deferred check of its status.
class IndexCheck {
 public:
  IndexCheck(const char* op, const Tensor& index, int64_t extent, cudaStream_t stream)
      : op_(op), index_(index), extent_(extent), stream_(stream),
        first_bad_(empty(Shape{1}, DType::int64, index.device())) {
    MIXGRAD_CUDA_CHECK(cudaMemsetAsync(first_bad_.raw_data(), 0xff, sizeof(unsigned long long), stream));
  }
  unsigned long long* word() const { return static_cast<unsigned long long*>(first_bad_.raw_data()); }
  /// Writes the status after the op's kernels and defers its check.
  void finish() {
    const Tensor status = empty(Shape{2}, DType::int64, index_.device());
    index_status_kernel<<<1, 1, 0, stream_>>>(device_ptr<const int64_t>(index_), word(),
                                              device_ptr<int64_t>(status));
    MIXGRAD_CUDA_CHECK(cudaGetLastError());
    defer_status_check(status, [op = std::string(op_), extent = extent_](const int64_t* st) {
      if (st[0] < 0) return;
      throw ValueError(op + ": index " + std::to_string(st[1]) + " (at position " + std::to_string(st[0]) +
                       " of the index tensor) is out of range for a dimension of " + std::to_string(extent) +
                       " (valid: 0 to " + std::to_string(extent - 1) + ")");
    });
  }

 private:
  const char* op_;
  Tensor index_;
  int64_t extent_;
  cudaStream_t stream_;
  Tensor first_bad_;
};

template <class T>
constexpr bool kAtomic = std::is_same_v<T, float> || std::is_same_v<T, double>;

// For element p of a [outer, K, inner] selection, the offset of its row
// idx[k] in the [outer, axis, inner] tensor; -1 for an index out of range
// (recorded in first_bad).
__device__ inline int64_t selected_offset(int64_t p, const int64_t* idx, Axis3 a, int64_t k_count,
                                          unsigned long long* first_bad) {
  const int64_t i = p % a.inner;
  const int64_t r = p / a.inner;
  const int64_t k = r % k_count, o = r / k_count;
  const int64_t v = idx[k];
  if (bad_index(v, a.axis, k, first_bad)) return -1;
  return (o * a.axis + v) * a.inner + i;
}

template <class U>
__global__ void index_select_kernel(const U* x, const int64_t* idx, Axis3 a, int64_t k_count, U* out, int64_t n,
                                    unsigned long long* first_bad) {
  MIXGRAD_GRID_STRIDE_LOOP(p, n) {
    const int64_t at = selected_offset(p, idx, a, k_count, first_bad);
    if (at >= 0) out[p] = x[at];
  }
}

template <class T>
__global__ void index_add_atomic_kernel(const T* src, const int64_t* idx, Axis3 a, int64_t k_count, T* out, int64_t n,
                                        unsigned long long* first_bad) {
  MIXGRAD_GRID_STRIDE_LOOP(p, n) {
    const int64_t at = selected_offset(p, idx, a, k_count, first_bad);
    if (at >= 0) atomicAdd(out + at, src[p]);
  }
}

// One thread per (outer, inner) column; indices in order.
template <class T>
__global__ void index_add_ordered_kernel(const T* src, const int64_t* idx, Axis3 a, int64_t k_count, T* out,
                                         int64_t columns, unsigned long long* first_bad) {
  using Acc = compute_t<T>;
  MIXGRAD_GRID_STRIDE_LOOP(c, columns) {
    const int64_t o = c / a.inner, i = c % a.inner;
    for (int64_t k = 0; k < k_count; ++k) {
      const int64_t v = idx[k];
      if (bad_index(v, a.axis, k, first_bad)) continue;
      T& d = out[(o * a.axis + v) * a.inner + i];
      d = cast<T>(cast<Acc>(d) + cast<Acc>(src[(o * k_count + k) * a.inner + i]));
    }
  }
}

// ---- index_put ----------------------------------------------------------------

struct PutIndices {
  const int64_t* idx[Shape::kMaxDims];
  int64_t extent[Shape::kMaxDims];
  int k;
};

// rows[m] = the row entry m names (cuda_plan::put_row), -1 for a bad index,
// whose first position (j * M + m: the CPU's check order) is recorded.
__global__ void put_rows_kernel(PutIndices a, int64_t m_count, int64_t* rows, unsigned long long* first_bad) {
  MIXGRAD_GRID_STRIDE_LOOP(m, m_count) {
    int bad_j = -1;
    rows[m] = cuda_plan::put_row(a.idx, a.extent, a.k, m, bad_j);
    if (bad_j >= 0) atomicMin(first_bad, static_cast<unsigned long long>(bad_j * m_count + m));
  }
}

// status = {the bad index tensor's number or -1, the index value}.
__global__ void put_rows_status_kernel(PutIndices a, int64_t m_count, const unsigned long long* first_bad,
                                       int64_t* status) {
  const unsigned long long f = *first_bad;
  const bool bad = f != ULLONG_MAX;
  const int64_t j = bad ? static_cast<int64_t>(f) / m_count : -1;
  status[0] = j;
  status[1] = bad ? a.idx[j][static_cast<int64_t>(f) % m_count] : 0;
}

// last[rows[m]] = the largest m naming that row.
__global__ void put_claim_kernel(const int64_t* rows, int64_t m_count, int64_t n_rows, long long* last) {
  MIXGRAD_GRID_STRIDE_LOOP(m, m_count) {
    const int64_t r = rows[m];
    if (cuda_plan::put_claims(n_rows, r)) atomicMax(last + r, static_cast<long long>(m));
  }
}

// Each element of the rows that won their claim is copied; the others are
// skipped, so every destination is written once, by the last entry naming it.
template <class U>
__global__ void put_write_kernel(const U* values, const int64_t* rows, const int64_t* last, int64_t n_rows,
                                 int64_t inner, U* out, int64_t n) {
  MIXGRAD_GRID_STRIDE_LOOP(p, n) {
    const int64_t m = p / inner;
    const int64_t r = rows[m];
    if (cuda_plan::put_wins(last, n_rows, r, m)) out[r * inner + p % inner] = values[p];
  }
}

// out[p] = x[offset of p's coordinates with `axis` replaced by idx[p]].
template <class U>
__global__ void gather_kernel(const char* x, cuda_plan::StridedIndexer<1> ix, int64_t axis_stride_bytes,
                              int64_t extent, const int64_t* idx, U* out, int64_t n, unsigned long long* first_bad) {
  MIXGRAD_GRID_STRIDE_LOOP(p, n) {
    const int64_t v = idx[p];
    if (bad_index(v, extent, p, first_bad)) continue;
    int64_t off[1];
    ix.offsets(p, off);
    out[p] = *reinterpret_cast<const U*>(x + off[0] + v * axis_stride_bytes);
  }
}

template <class T>
__global__ void scatter_add_atomic_kernel(const T* src, cuda_plan::StridedIndexer<1> ix, int64_t axis_stride_bytes,
                                          int64_t extent, const int64_t* idx, char* out, int64_t n,
                                          unsigned long long* first_bad) {
  MIXGRAD_GRID_STRIDE_LOOP(p, n) {
    const int64_t v = idx[p];
    if (bad_index(v, extent, p, first_bad)) continue;
    int64_t off[1];
    ix.offsets(p, off);
    atomicAdd(reinterpret_cast<T*>(out + off[0] + v * axis_stride_bytes), src[p]);
  }
}

// One thread per (leading, trailing) column of the index; positions along
// the axis in order.
template <class T>
__global__ void scatter_add_ordered_kernel(const T* src, cuda_plan::StridedIndexer<1> ix, int64_t axis_stride_bytes,
                                           int64_t extent, const int64_t* idx, char* out, int64_t k_count,
                                           int64_t inner, int64_t columns, unsigned long long* first_bad) {
  using Acc = compute_t<T>;
  MIXGRAD_GRID_STRIDE_LOOP(c, columns) {
    const int64_t o = c / inner, i = c % inner;
    for (int64_t k = 0; k < k_count; ++k) {
      const int64_t p = (o * k_count + k) * inner + i;
      const int64_t v = idx[p];
      if (bad_index(v, extent, p, first_bad)) continue;
      int64_t off[1];
      ix.offsets(p, off);
      T& d = *reinterpret_cast<T*>(out + off[0] + v * axis_stride_bytes);
      d = cast<T>(cast<Acc>(d) + cast<Acc>(src[p]));
    }
  }
}

/// Calls f.template operator()<U>() with U an unsigned type of `bytes` bytes.
template <class F>
void visit_bits(int64_t bytes, F&& f) {
  switch (bytes) {
    case 1: return f.template operator()<uint8_t>();
    case 2: return f.template operator()<uint16_t>();
    case 4: return f.template operator()<uint32_t>();
    default: return f.template operator()<uint64_t>();
  }
}

/// The indexer of `shape`'s coordinates into `t`, the axis left out.
cuda_plan::StridedIndexer<1> without_axis(const Shape& shape, const Tensor& t, int axis) {
  return cuda_plan::axis_free_indexer(shape, t.strides(), element_size(t.dtype()), axis);
}

}  // namespace

void index_select(const Tensor& x, Axis3 a, const Tensor& index, const Tensor& out) {
  const int64_t k_count = index.numel();
  const int64_t n = out.numel();
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(n);
  if (lc.blocks == 0) return;
  LaunchOn on(out);
  IndexCheck check("index_select", index, a.axis, on.stream);
  visit_bits(element_size(x.dtype()), [&]<class U>() {
    index_select_kernel<U><<<lc.blocks, lc.threads, 0, on.stream>>>(
        static_cast<const U*>(x.raw_data()), device_ptr<const int64_t>(index), a, k_count,
        static_cast<U*>(out.raw_data()), n, check.word());
  });
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
  check.finish();
}

void index_add(const Tensor& src, Axis3 a, const Tensor& index, const Tensor& out) {
  const int64_t k_count = index.numel();
  if (src.numel() == 0) return;
  LaunchOn on(out);
  IndexCheck check("index_add", index, a.axis, on.stream);
  visit_dtype(out.dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) {
      throw DTypeError("index_add: bool tensors cannot be added");
    } else if constexpr (kAtomic<T>) {
      const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(src.numel());
      index_add_atomic_kernel<T><<<lc.blocks, lc.threads, 0, on.stream>>>(
          device_ptr<const T>(src), device_ptr<const int64_t>(index), a, k_count, device_ptr<T>(out), src.numel(),
          check.word());
    } else {
      const int64_t columns = a.outer * a.inner;
      const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(columns);
      index_add_ordered_kernel<T><<<lc.blocks, lc.threads, 0, on.stream>>>(
          device_ptr<const T>(src), device_ptr<const int64_t>(index), a, k_count, device_ptr<T>(out), columns,
          check.word());
    }
  });
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
  check.finish();
}

void gather(const Tensor& x, int axis, const Tensor& index, const Tensor& out) {
  const int64_t n = out.numel();
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(n);
  if (lc.blocks == 0) return;
  LaunchOn on(out);
  const int64_t extent = x.shape()[axis];
  IndexCheck check("gather", index, extent, on.stream);
  const auto ix = without_axis(index.shape(), x, axis);
  const int64_t es = element_size(x.dtype());
  visit_bits(es, [&]<class U>() {
    gather_kernel<U><<<lc.blocks, lc.threads, 0, on.stream>>>(
        static_cast<const char*>(x.raw_data()), ix, x.strides()[axis] * es, extent, device_ptr<const int64_t>(index),
        static_cast<U*>(out.raw_data()), n, check.word());
  });
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
  check.finish();
}

void scatter_add(const Tensor& src, int axis, const Tensor& index, const Tensor& out) {
  const Shape& s = index.shape();
  const int64_t n = index.numel();
  if (n == 0) return;
  LaunchOn on(out);
  const int64_t extent = out.shape()[axis];
  IndexCheck check("scatter_add", index, extent, on.stream);
  const auto ix = without_axis(s, out, axis);
  const int64_t axis_bytes = out.strides()[axis] * element_size(out.dtype());
  visit_dtype(out.dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) {
      throw DTypeError("scatter_add: bool tensors cannot be added");
    } else if constexpr (kAtomic<T>) {
      const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(n);
      scatter_add_atomic_kernel<T><<<lc.blocks, lc.threads, 0, on.stream>>>(
          device_ptr<const T>(src), ix, axis_bytes, extent, device_ptr<const int64_t>(index),
          static_cast<char*>(out.raw_data()), n, check.word());
    } else {
      int64_t outer = 1, inner = 1;
      for (int d = 0; d < axis; ++d) outer *= s[d];
      for (int d = axis + 1; d < s.ndim(); ++d) inner *= s[d];
      const int64_t columns = outer * inner;
      const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(columns);
      if (lc.blocks == 0) return;
      scatter_add_ordered_kernel<T><<<lc.blocks, lc.threads, 0, on.stream>>>(
          device_ptr<const T>(src), ix, axis_bytes, extent, device_ptr<const int64_t>(index),
          static_cast<char*>(out.raw_data()), s[axis], inner, columns, check.word());
    }
  });
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
  check.finish();
}

void index_put_rows(std::span<const Tensor> indices, const Shape& extents, const std::string& x_desc,
                    const Tensor& rows) {
  const int64_t m_count = rows.numel();
  if (m_count == 0) return;
  PutIndices a{};
  a.k = static_cast<int>(indices.size());
  for (int j = 0; j < a.k; ++j) {
    a.idx[j] = device_ptr<const int64_t>(indices[static_cast<size_t>(j)]);
    a.extent[j] = extents[j];
  }
  LaunchOn on(rows);
  const Tensor first_bad = empty(Shape{1}, DType::int64, rows.device());
  auto* word = static_cast<unsigned long long*>(first_bad.raw_data());
  MIXGRAD_CUDA_CHECK(cudaMemsetAsync(word, 0xff, sizeof(unsigned long long), on.stream));
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(m_count);
  put_rows_kernel<<<lc.blocks, lc.threads, 0, on.stream>>>(a, m_count, device_ptr<int64_t>(rows), word);
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
  const Tensor status = empty(Shape{2}, DType::int64, rows.device());
  put_rows_status_kernel<<<1, 1, 0, on.stream>>>(a, m_count, word, device_ptr<int64_t>(status));
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
  defer_status_check(status, [x_desc, extents](const int64_t* st) {
    if (st[0] < 0) return;
    const int64_t extent = extents[static_cast<int>(st[0])];
    throw ValueError("index_put: index " + std::to_string(st[1]) + " is out of range for dimension " +
                     std::to_string(st[0]) + " of " + x_desc + " (valid: " + std::to_string(-extent) + " to " +
                     std::to_string(extent - 1) + ")");
  });
}

void index_put(const Tensor& values, const Tensor& rows, bool accumulate, const Tensor& out) {
  const int64_t m_count = rows.numel();
  if (m_count == 0 || values.numel() == 0) return;
  const int64_t inner = values.numel() / m_count;
  const int64_t n_rows = out.numel() / inner;
  LaunchOn on(out);
  const Axis3 a{.outer = 1, .axis = n_rows, .inner = inner};
  if (accumulate) {  // index_add's kernels over [1, N, inner]; bad rows (-1) skipped unrecorded
    visit_dtype(out.dtype(), [&]<class T>() {
      if constexpr (kAtomic<T>) {
        const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(values.numel());
        index_add_atomic_kernel<T><<<lc.blocks, lc.threads, 0, on.stream>>>(
            device_ptr<const T>(values), device_ptr<const int64_t>(rows), a, m_count, device_ptr<T>(out),
            values.numel(), nullptr);
      } else {
        const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(inner);
        index_add_ordered_kernel<T><<<lc.blocks, lc.threads, 0, on.stream>>>(
            device_ptr<const T>(values), device_ptr<const int64_t>(rows), a, m_count, device_ptr<T>(out), inner,
            nullptr);
      }
    });
    MIXGRAD_CUDA_CHECK(cudaGetLastError());
    return;
  }
  // Claim each row for its last entry, then copy only the claimed rows.
  const Tensor last = empty(Shape{n_rows}, DType::int64, out.device());
  MIXGRAD_CUDA_CHECK(cudaMemsetAsync(last.raw_data(), 0xff, static_cast<size_t>(n_rows) * sizeof(int64_t), on.stream));
  const cuda_plan::LaunchConfig lc_claim = cuda_plan::launch_config(m_count);
  put_claim_kernel<<<lc_claim.blocks, lc_claim.threads, 0, on.stream>>>(
      device_ptr<const int64_t>(rows), m_count, n_rows, static_cast<long long*>(last.raw_data()));
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(values.numel());
  visit_bits(element_size(out.dtype()), [&]<class U>() {
    put_write_kernel<U><<<lc.blocks, lc.threads, 0, on.stream>>>(
        static_cast<const U*>(values.raw_data()), device_ptr<const int64_t>(rows),
        device_ptr<const int64_t>(last), n_rows, inner, static_cast<U*>(out.raw_data()), values.numel());
  });
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

// The kernels check their indices as they read them (IndexCheck).
void check_indices(const char*, const Tensor&, int64_t, const std::string&) {}

MIXGRAD_CUDA_KERNEL(check_indices, check_indices);
MIXGRAD_CUDA_KERNEL(index_select, index_select);
MIXGRAD_CUDA_KERNEL(index_add, index_add);
MIXGRAD_CUDA_KERNEL(gather, gather);
MIXGRAD_CUDA_KERNEL(scatter_add, scatter_add);
MIXGRAD_CUDA_KERNEL(index_put_rows, index_put_rows);
MIXGRAD_CUDA_KERNEL(index_put, index_put);

}  // namespace mixgrad::backend::cuda
