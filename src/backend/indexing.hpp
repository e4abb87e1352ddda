// Backend seam of the indexing ops (index_select / embedding, gather,
// scatter_add, index_put).
//
// Tensors are contiguous and viewed as [outer, axis, inner] around the axis
// the op works along (Axis3, backend/axis3.hpp); index tensors are int64,
// validated in range by check_indices before the kernels on the CPU, by the kernels themselves on
// CUDA (a bad index is skipped and reported as a ValueError at the device's
// next host sync, backend/pending_checks.hpp). The scatter kernels add into `out` (the
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

#include "backend/axis3.hpp"
#include "backend/dispatch.hpp"

namespace mixgrad::backend {

/// Throws ValueError naming `op`, the first index outside [0, extent) and
/// `what` the index reaches into ("dimension 0 of float32[3, 4]"). On the
/// CPU it reads the indices at once; on CUDA it does nothing, the kernels
/// checking as they read (see above).
MIXGRAD_STUB(check_indices, 1,
             void(const char* op, const Tensor& index, int64_t extent, const std::string& what));  // on index's device
/// out [outer, K, inner] = x [outer, axis, inner] at index[k] (index [K]).
MIXGRAD_STUB(index_select, 3,
             void(const Tensor& x, Axis3 a, const Tensor& index, const Tensor& out));  // on out's device
/// out [outer, axis, inner] at index[k] += src [outer, K, inner]; repeated
/// indices accumulate (the backward of index_select and embedding).
MIXGRAD_STUB(index_add, 3,
             void(const Tensor& src, Axis3 a, const Tensor& index, const Tensor& out));  // on out's device
/// out[p] = x[p with coordinate `axis` replaced by index[p]], out and index
/// of one shape (each extent <= x's, except along `axis`).
MIXGRAD_STUB(gather, 3, void(const Tensor& x, int axis, const Tensor& index, const Tensor& out));  // on out's device
/// out[p with coordinate `axis` replaced by index[p]] += src[p], src and
/// index of one shape; repeated indices accumulate.
MIXGRAD_STUB(scatter_add, 3,
             void(const Tensor& src, int axis, const Tensor& index, const Tensor& out));  // on out's device
/// rows [M] (int64, contiguous, on the indices' device) = the rows of x
/// seen as [N, inner] (N = the product of `extents`, x's leading k extents)
/// named by the k index tensors (int64, contiguous, M elements each): the
/// indices' row-major number, a negative index counting from the end of its
/// dimension. An index outside [-extent, extent) is a ValueError naming
/// x_desc and the dimension: thrown here on the CPU before anything is
/// written; on CUDA its row is set to -1 (index_put then skips it) and the
/// error is thrown at the device's next host sync (backend/pending_checks.hpp).
MIXGRAD_STUB(index_put_rows, 3,
             void(std::span<const Tensor> indices, const Shape& extents, const std::string& x_desc,
                  const Tensor& rows));  // on rows' device
/// out [N, inner] row rows[m] = values [M, inner] row m (rows [M], in
/// range; CUDA skips a row of -1, index_put_rows' mark of a bad index), or
/// += with `accumulate`. Rows are written in order m = 0..M-1, so a repeated
/// row keeps the last value written (accumulate: adds them all). On CUDA the
/// same result, deterministically: the last entry naming a row claims it and
/// only it writes; accumulate adds as index_add does (atomics in float32 /
/// float64, entries in order in the other dtypes).
MIXGRAD_STUB(index_put, 3,
             void(const Tensor& values, const Tensor& rows, bool accumulate, const Tensor& out));  // on out's device

}  // namespace mixgrad::backend
