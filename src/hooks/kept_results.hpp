// Selective checkpointing's seam in the ops (autodiff::checkpoint with
// `keep`): an op whose results a checkpoint keeps computes them through
// keep_or_compute. In the checkpoint's first run the results are kept; when
// the backward runs the function again, the same op call gets them back
// instead of computing them, so only the ops not kept are recomputed.
//
//   const Tensor out = autodiff::keep_or_compute(OpKind::linear, out_shape, dtype, [&] { return compute(); });
//
// The op is recorded as usual either way (its backward needs its inputs, which
// are recomputed). Outside a selective checkpoint this costs one
// thread-local load and a branch. Implemented in src/autodiff/selective.cpp.
#pragma once

#include <chrono>
#include <optional>
#include <type_traits>
#include <vector>

#include "core/op_table.hpp"
#include "mixgrad/tensor.hpp"

namespace mixgrad::autodiff {

namespace detail {
/// >0 while a selective checkpoint keeps or hands back results on this thread.
int& keeping();
/// The results kept for this op call, when a recomputation hands them back;
/// StateError when the recomputation runs another op or gives the first
/// result another shape or dtype than the first run.
std::optional<std::vector<Tensor>> reuse_results(OpKind op, const Shape& shape, DType dtype);
/// Keeps the results of this op call, which took `seconds` to compute, for a
/// later recomputation, in each checkpoint's first run on this thread that
/// keeps `op` (above the recomputation that handed them back, if one did).
void keep_results(OpKind op, const std::vector<Tensor>& results, double seconds);
}  // namespace detail

/// compute()'s results (a Tensor or a std::array of them; the first has
/// `shape` and `dtype`), or the ones kept for this call (see above).
template <class Compute>
auto keep_or_compute(OpKind op, const Shape& shape, DType dtype, Compute&& compute) -> decltype(compute()) {
  using R = decltype(compute());
  if (detail::keeping() == 0) return compute();
  if (std::optional<std::vector<Tensor>> kept = detail::reuse_results(op, shape, dtype)) {
    detail::keep_results(op, *kept, 0);  // for a nested checkpoint's first run inside the recomputation
    if constexpr (std::is_same_v<R, Tensor>) {
      return (*kept)[0];
    } else {
      R r;
      for (size_t i = 0; i < r.size(); ++i) r[i] = (*kept)[i];
      return r;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  R r = compute();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if constexpr (std::is_same_v<R, Tensor>)
    detail::keep_results(op, {r}, seconds);
  else
    detail::keep_results(op, std::vector<Tensor>(r.begin(), r.end()), seconds);
  return r;
}

}  // namespace mixgrad::autodiff
