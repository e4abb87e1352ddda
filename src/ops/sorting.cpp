// F::topk, F::sort and F::argsort: one backend kernel orders each line along
// the axis and keeps its first k positions (k = the extent for sort).
//
// The backward scatters the values' gradient to the positions the indices
// name (backend::scatter_add into zeros); positions within a line are
// distinct, so no two gradients meet. A 0-d input is one line of one element.
#include "mixgrad/ops/sorting.hpp"

#include <algorithm>
#include <string>

#include "backend/indexing.hpp"
#include "backend/sorting.hpp"
#include "hooks/op_hooks.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/indexing.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

/// The ordered first k elements of every line along `dim` (normalized),
/// with the values' backward recorded.
ValuesIndices ordered(OpKind kind, const Tensor& x_in, int64_t k, int dim, bool descending) {
  Tensor x = x_in;
  amp::autocast_inputs(kind, {&x});
  const Shape xshape = x.shape();
  const backend::Axis3 a = backend::axis3(xshape, dim);
  Shape out_shape;
  if (x.ndim() > 0) {
    out_shape = xshape;
    out_shape[dim] = k;
  } else if (k == 0) {
    out_shape = Shape{0};  // none of the one element: an empty 1-d result
  }
  ValuesIndices r{empty(out_shape, x.dtype(), x.device()), empty(out_shape, DType::int64, x.device())};
  backend::sort_lines(ops::dense(x), a, k, descending, r.values, r.indices);
  const Tensor index = r.indices;
  autodiff::record(kind, {&x}, r.values, [xshape, dim, index] {
    return [xshape, dim, index](const Tensor& g, autodiff::InputGrads& gi) {
      if (xshape.ndim() > 0 && gi.create_graph())  // g back to where each value came from, tracked
        return gi.set(0, scatter_add(zeros(xshape, g.dtype(), g.device()), dim, index, g));
      if (xshape.ndim() == 0) {
        gi.set(0, index.numel() == 1 ? ops::dense(g) : zeros(xshape, g.dtype(), g.device()));
        return;
      }
      Tensor dx = zeros(xshape, g.dtype(), g.device());
      backend::scatter_add(ops::dense(g), dim, index, dx);
      gi.set(0, dx);
    };
  });
  return r;
}

int checked_dim(const char* op, const Tensor& x, int dim) {
  ops::check_defined(op, {&x});
  return normalize_axis(dim, std::max(x.ndim(), 1), op);
}

}  // namespace

ValuesIndices topk(const Tensor& x, int64_t k, int dim, bool largest, bool /*sorted*/) {
  constexpr const char* op = "topk";
  const int d = checked_dim(op, x, dim);
  const int64_t extent = x.ndim() == 0 ? 1 : x.shape()[d];
  if (k < 0 || k > extent)
    throw ValueError(std::string(op) + ": k = " + std::to_string(k) + " is out of range for dimension " +
                     std::to_string(d) + " of " + ops::describe(x) + " (valid: 0 to " + std::to_string(extent) +
                     ")");
  return ordered(OpKind::topk, x, k, d, largest);
}

ValuesIndices sort(const Tensor& x, int dim, bool descending) {
  constexpr const char* op = "sort";
  const int d = checked_dim(op, x, dim);
  return ordered(OpKind::sort, x, x.ndim() == 0 ? 1 : x.shape()[d], d, descending);
}

Tensor argsort(const Tensor& x, int dim, bool descending) {
  constexpr const char* op = "argsort";
  const int d = checked_dim(op, x, dim);
  autodiff::NoRecordScope guard;  // indices only: nothing to record
  return ordered(OpKind::sort, x, x.ndim() == 0 ? 1 : x.shape()[d], d, descending).indices;
}

}  // namespace mixgrad::F
