// Backend seam of the indexing ops (index_select / embedding, gather,
// scatter_add, index_put) and of the scans along one axis (cumsum, prod).
//
// Tensors are contiguous and viewed as [outer, axis, inner] around the axis
// the op works along (Axis3); index tensors are int64, validated in range by
// the caller on the CPU, by the kernels themselves on CUDA (a bad index is
// skipped and reported as a ValueError at the device's next host sync,
// backend/pending_checks.hpp). The scatter kernels add into `out` (the
// caller fills it first); the CPU's are race-free without atomics (work is
// split only over positions that never share a destination), CUDA's use
// atomics in float32 / float64 and that ordered split in the other dtypes.
//
//   backend::Axis3 a{.outer = 1, .axis = num, .inner = dim};
//   backend::index_select(weight, a, index, out);   // embedding rows
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "backend/dispatch.hpp"

namespace mixgrad::backend {

/// A contiguous tensor viewed as [outer, axis, inner].
struct Axis3 {
  int64_t outer = 1;
  int64_t axis = 1;
  int64_t inner = 1;
};

namespace cpu {
void index_select(const Tensor& x, Axis3 a, const Tensor& index, const Tensor& out);
void index_add(const Tensor& src, Axis3 a, const Tensor& index, const Tensor& out);
void gather(const Tensor& x, int axis, const Tensor& index, const Tensor& out);
void scatter_add(const Tensor& src, int axis, const Tensor& index, const Tensor& out);
void index_put_rows(std::span<const Tensor> indices, const Shape& extents, const std::string& x_desc,
                    const Tensor& rows);
void index_put(const Tensor& values, const Tensor& rows, bool accumulate, const Tensor& out);
void cumsum(const Tensor& x, Axis3 a, bool reverse, const Tensor& out);
void prod(const Tensor& x, Axis3 a, const Tensor& out);
void prod_grad(const Tensor& g, const Tensor& x, Axis3 a, const Tensor& dx);
}  // namespace cpu

namespace cuda {
void index_select(const Tensor& x, Axis3 a, const Tensor& index, const Tensor& out);
void index_add(const Tensor& src, Axis3 a, const Tensor& index, const Tensor& out);
void gather(const Tensor& x, int axis, const Tensor& index, const Tensor& out);
void scatter_add(const Tensor& src, int axis, const Tensor& index, const Tensor& out);
void index_put_rows(std::span<const Tensor> indices, const Shape& extents, const std::string& x_desc,
                    const Tensor& rows);
void index_put(const Tensor& values, const Tensor& rows, bool accumulate, const Tensor& out);
void cumsum(const Tensor& x, Axis3 a, bool reverse, const Tensor& out);
void prod(const Tensor& x, Axis3 a, const Tensor& out);
void prod_grad(const Tensor& g, const Tensor& x, Axis3 a, const Tensor& dx);
}  // namespace cuda

/// out [outer, K, inner] = x [outer, axis, inner] at index[k] (index [K]).
inline void index_select(const Tensor& x, Axis3 a, const Tensor& index, const Tensor& out) {
  MIXGRAD_DISPATCH_CUDA(out.device(), index_select, (x, a, index, out));
}
/// out [outer, axis, inner] at index[k] += src [outer, K, inner]; repeated
/// indices accumulate (the backward of index_select and embedding).
inline void index_add(const Tensor& src, Axis3 a, const Tensor& index, const Tensor& out) {
  MIXGRAD_DISPATCH_CUDA(out.device(), index_add, (src, a, index, out));
}
/// out[p] = x[p with coordinate `axis` replaced by index[p]], out and index
/// of one shape (each extent <= x's, except along `axis`).
inline void gather(const Tensor& x, int axis, const Tensor& index, const Tensor& out) {
  MIXGRAD_DISPATCH_CUDA(out.device(), gather, (x, axis, index, out));
}
/// out[p with coordinate `axis` replaced by index[p]] += src[p], src and
/// index of one shape; repeated indices accumulate.
inline void scatter_add(const Tensor& src, int axis, const Tensor& index, const Tensor& out) {
  MIXGRAD_DISPATCH_CUDA(out.device(), scatter_add, (src, axis, index, out));
}
/// rows [M] (int64, contiguous, on the indices' device) = the rows of x
/// seen as [N, inner] (N = the product of `extents`, x's leading k extents)
/// named by the k index tensors (int64, contiguous, M elements each): the
/// indices' row-major number, a negative index counting from the end of its
/// dimension. An index outside [-extent, extent) is a ValueError naming
/// x_desc and the dimension: thrown here on the CPU before anything is
/// written; on CUDA its row is set to -1 (index_put then skips it) and the
/// error is thrown at the device's next host sync (backend/pending_checks.hpp).
inline void index_put_rows(std::span<const Tensor> indices, const Shape& extents, const std::string& x_desc,
                           const Tensor& rows) {
  MIXGRAD_DISPATCH_CUDA(rows.device(), index_put_rows, (indices, extents, x_desc, rows));
}
/// out [N, inner] row rows[m] = values [M, inner] row m (rows [M], in
/// range; CUDA skips a row of -1, index_put_rows' mark of a bad index), or
/// += with `accumulate`. Rows are written in order m = 0..M-1, so a repeated
/// row keeps the last value written (accumulate: adds them all). On CUDA the
/// same result, deterministically: the last entry naming a row claims it and
/// only it writes; accumulate adds as index_add does (atomics in float32 /
/// float64, entries in order in the other dtypes).
inline void index_put(const Tensor& values, const Tensor& rows, bool accumulate, const Tensor& out) {
  MIXGRAD_DISPATCH_CUDA(out.device(), index_put, (values, rows, accumulate, out));
}
/// out = running sum of x along the axis (from the end when `reverse`: the
/// backward of cumsum), accumulated in float (double for float64).
inline void cumsum(const Tensor& x, Axis3 a, bool reverse, const Tensor& out) {
  MIXGRAD_DISPATCH_CUDA(out.device(), cumsum, (x, a, reverse, out));
}
/// out [outer, inner] = product of x along the axis.
inline void prod(const Tensor& x, Axis3 a, const Tensor& out) { MIXGRAD_DISPATCH_CUDA(out.device(), prod, (x, a, out)); }
/// dx = g * (product of the other elements of x's line), exact with zeros
/// in the line (no division by them); g [outer, inner].
inline void prod_grad(const Tensor& g, const Tensor& x, Axis3 a, const Tensor& dx) {
  MIXGRAD_DISPATCH_CUDA(dx.device(), prod_grad, (g, x, a, dx));
}

}  // namespace mixgrad::backend
