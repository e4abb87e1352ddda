// The built-in matrix product behind the fallback paths of matmul, linear and
// conv2d (im2col). It computes in the accumulation type (float, or double for
// float64) from operands of any element type and any strides: operands are
// converted once into packed row-major buffers, then each block of four output
// rows streams through the packed right operand with an inner loop over
// contiguous columns that the compiler vectorises.
//
//   fallback::gemm<float>(m, n, k, {a, lda, 1}, {b, 1, ldb}, c, n, OutputMode::overwrite);
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/cast.hpp"
#include "kernels/loops.hpp"

namespace mixgrad::backend::cpu {

/// Whether a kernel replaces its output or adds to it.
enum class OutputMode : uint8_t { overwrite, accumulate };

namespace fallback {

/// A strided matrix: element (i, j) at p[i * row_stride + j * col_stride].
template <class T>
struct MatView {
  const T* p;
  int64_t row_stride;
  int64_t col_stride;
  const T& operator()(int64_t i, int64_t j) const { return p[i * row_stride + j * col_stride]; }
};

/// Rows [r0, r1) of `v` (k columns) converted into a row-major Acc buffer.
template <class Acc, class T>
void pack_rows(MatView<T> v, int64_t r0, int64_t r1, int64_t k, Acc* out) {
  for (int64_t i = r0; i < r1; ++i) {
    Acc* o = out + (i - r0) * k;
    if (v.col_stride == 1) {
      const T* src = v.p + i * v.row_stride;
      for (int64_t j = 0; j < k; ++j) o[j] = kernels::cast<Acc>(src[j]);
    } else {
      for (int64_t j = 0; j < k; ++j) o[j] = kernels::cast<Acc>(v(i, j));
    }
  }
}

/// c[i * ldc + j] (=|+=) sum_p a(i, p) * b(p, j) for i < m, j < n, in Acc.
/// c is an Acc buffer; convert to the output type afterwards.
template <class Acc, class TA, class TB>
void gemm(int64_t m, int64_t n, int64_t k, MatView<TA> a, MatView<TB> b, Acc* c, int64_t ldc, OutputMode mode) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (mode == OutputMode::overwrite)
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, Acc(0));
    return;
  }
  // The right operand as a row-major Acc [k, n] (used in place when it is one).
  std::vector<Acc> packed_b;
  const Acc* bp = nullptr;
  int64_t ldb = n;
  if constexpr (std::is_same_v<TB, Acc>) {
    if (b.col_stride == 1) {
      bp = b.p;
      ldb = b.row_stride;
    }
  }
  if (bp == nullptr) {
    packed_b.resize(static_cast<size_t>(k * n));
    pack_rows<Acc>(b, 0, k, n, packed_b.data());
    bp = packed_b.data();
  }
  constexpr int64_t kRows = 4;
  const int64_t blocks = (m + kRows - 1) / kRows;
  const int64_t flops_per_block = kRows * n * k;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(1, flops_per_block));
  kernels::parallel_for(blocks, grain, [&](int64_t b0, int64_t b1) {
    std::vector<Acc> arow(static_cast<size_t>(kRows * k));
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t i0 = blk * kRows, i1 = std::min(m, i0 + kRows);
      pack_rows<Acc>(a, i0, i1, k, arow.data());
      Acc* c0 = c + i0 * ldc;
      if (mode == OutputMode::overwrite)
        for (int64_t i = i0; i < i1; ++i) std::fill(c + i * ldc, c + i * ldc + n, Acc(0));
      if (i1 - i0 == kRows) {
        Acc* c1 = c0 + ldc;
        Acc* c2 = c1 + ldc;
        Acc* c3 = c2 + ldc;
        for (int64_t p = 0; p < k; ++p) {
          const Acc a0 = arow[p], a1 = arow[k + p], a2 = arow[2 * k + p], a3 = arow[3 * k + p];
          const Acc* brow = bp + p * ldb;
#pragma omp simd
          for (int64_t j = 0; j < n; ++j) {
            const Acc bv = brow[j];
            c0[j] += a0 * bv;
            c1[j] += a1 * bv;
            c2[j] += a2 * bv;
            c3[j] += a3 * bv;
          }
        }
      } else {
        for (int64_t i = i0; i < i1; ++i) {
          Acc* ci = c + i * ldc;
          const Acc* ai = arow.data() + (i - i0) * k;
          for (int64_t p = 0; p < k; ++p) {
            const Acc av = ai[p];
            const Acc* brow = bp + p * ldb;
#pragma omp simd
            for (int64_t j = 0; j < n; ++j) ci[j] += av * brow[j];
          }
        }
      }
    }
  });
}

}  // namespace fallback
}  // namespace mixgrad::backend::cpu
