// F::embedding, F::index_select, F::gather, F::scatter_add and F::index_put.
//
// CPU indices are read once on the host to check their range before any
// output exists, so a bad index leaves every tensor and the tape as they
// were. CUDA indices are checked by the kernels as they read them (a bad one
// is skipped) and reported as the same ValueError at the device's next host
// synchronisation, as the class losses report labels.
// Backward passes are scatter-adds into a zeroed gradient (index_add,
// scatter_add), deterministic because the CPU kernels never split one
// destination line across threads; scatter_add's own backward is a gather.
#include "mixgrad/ops/indexing.hpp"

#include <algorithm>
#include <string>

#include "backend/copy.hpp"
#include "backend/indexing.hpp"
#include "core/view.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/reduction.hpp"
#include "mixgrad/ops/resize.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

void check_index_dtype(const char* op, const Tensor& index) {
  if (index.dtype() != DType::int64)
    throw DTypeError(std::string(op) + ": expected an int64 index tensor, got " + ops::describe(index));
}

/// x [.., axis, ..] at `index` (dense int64) along `dim`; records the
/// index_add backward. Shared by embedding and index_select.
Tensor select_rows(OpKind op, const Tensor& x, int dim, const Tensor& index, const Shape& out_shape) {
  const Shape xshape = x.shape();
  backend::Axis3 a = backend::axis3(xshape, dim);
  Tensor out = empty(out_shape, x.dtype(), x.device());
  backend::index_select(ops::dense(x), a, index, out);
  autodiff::record(op, {&x}, out, [xshape, a, index] {
    return [xshape, a, index](const Tensor& g, autodiff::InputGrads& gi) {
      if (gi.create_graph()) {  // index_add as a tracked scatter_add over [outer, axis, inner]
        const int64_t k = index.numel();
        const Shape g3{a.outer, k, a.inner};
        const Tensor idx = broadcast_to(reshape(index, Shape{1, k, 1}), g3).contiguous();
        const Tensor dx = scatter_add(zeros(Shape{a.outer, a.axis, a.inner}, g.dtype(), g.device()), 1, idx,
                                      reshape(g, g3));
        return gi.set(0, reshape(dx, xshape));
      }
      Tensor dx = zeros(xshape, g.dtype(), g.device());
      backend::index_add(ops::dense(g), a, index, dx);
      gi.set(0, dx);
    };
  });
  return out;
}

/// The leading `shape` block of t, as a view.
Tensor leading_block(const Tensor& t, const Shape& shape) { return view::make(t, shape, t.strides()); }

/// t seen as `shape` (which t broadcasts to) without a copy: stride 0 along
/// the dimensions t lacks or has extent 1 in.
Tensor broadcast_view(const Tensor& t, const Shape& shape) {
  Shape strides;
  const int lead = shape.ndim() - t.ndim();
  for (int d = 0; d < shape.ndim(); ++d)
    strides.push_back((d < lead || t.shape()[d - lead] == 1) ? 0 : t.strides()[d - lead]);
  return view::make(t, shape, strides);
}

/// x [N, inner] with rows[m] of g replaced by zero: index_put's gradient to x
/// where it overwrote (a tracked op, so differentiable again).
Tensor zero_rows(const Tensor& g2, const Tensor& rows) {
  return index_put(g2, {rows}, zeros(Shape{}, g2.dtype(), g2.device()));
}

}  // namespace

Tensor embedding(const Tensor& weight_in, const Tensor& indices) {
  constexpr const char* op = "embedding";
  ops::check_defined(op, {&weight_in, &indices});
  ops::check_same_device(op, {&weight_in, &indices});
  if (weight_in.ndim() != 2)
    throw ShapeError(std::string(op) + ": expected a 2-d weight [num_embeddings, embedding_dim], got " +
                     ops::describe(weight_in));
  ops::check_floating(op, weight_in);
  check_index_dtype(op, indices);
  if (indices.ndim() + 1 > Shape::kMaxDims)
    throw ShapeError(std::string(op) + ": indices " + ops::describe(indices) + " have too many dimensions");
  const Tensor index = ops::dense(indices);
  backend::check_indices(op, index, weight_in.shape()[0],
                         "an embedding table of " + std::to_string(weight_in.shape()[0]) + " rows (weight " +
                             ops::describe(weight_in) + ")");
  Tensor weight = weight_in;
  amp::autocast_inputs(OpKind::embedding, {&weight});
  Shape out_shape = indices.shape();
  out_shape.push_back(weight.shape()[1]);
  return select_rows(OpKind::embedding, weight, 0, index, out_shape);
}

Tensor index_select(const Tensor& x_in, int dim, const Tensor& index_in) {
  constexpr const char* op = "index_select";
  ops::check_defined(op, {&x_in, &index_in});
  ops::check_same_device(op, {&x_in, &index_in});
  check_index_dtype(op, index_in);
  if (index_in.ndim() > 1)
    throw ShapeError(std::string(op) + ": expected a 1-d index, got " + ops::describe(index_in));
  if (x_in.ndim() == 0) throw ShapeError(std::string(op) + ": cannot index a 0-d tensor " + ops::describe(x_in));
  const int d = normalize_axis(dim, x_in.ndim(), op);
  const Tensor index = ops::dense(index_in);
  backend::check_indices(op, index, x_in.shape()[d],
                         "dimension " + std::to_string(d) + " of " + ops::describe(x_in));
  Tensor x = x_in;
  amp::autocast_inputs(OpKind::index_select, {&x});
  Shape out_shape = x.shape();
  out_shape[d] = index.numel();
  return select_rows(OpKind::index_select, x, d, index, out_shape);
}

Tensor gather(const Tensor& x_in, int dim, const Tensor& index_in) {
  constexpr const char* op = "gather";
  ops::check_defined(op, {&x_in, &index_in});
  ops::check_same_device(op, {&x_in, &index_in});
  check_index_dtype(op, index_in);
  if (x_in.ndim() == 0 || index_in.ndim() != x_in.ndim())
    throw ShapeError(std::string(op) + ": expected an index of the input's rank (at least 1), got " +
                     ops::describe(index_in) + " for " + ops::describe(x_in));
  const int d = normalize_axis(dim, x_in.ndim(), op);
  for (int k = 0; k < x_in.ndim(); ++k)
    if (k != d && index_in.shape()[k] > x_in.shape()[k])
      throw ShapeError(std::string(op) + ": index " + ops::describe(index_in) + " is larger than the input " +
                       ops::describe(x_in) + " along dimension " + std::to_string(k));
  const Tensor index = ops::dense(index_in);
  backend::check_indices(op, index, x_in.shape()[d],
                         "dimension " + std::to_string(d) + " of " + ops::describe(x_in));
  Tensor x = x_in;
  amp::autocast_inputs(OpKind::gather, {&x});
  Tensor out = empty(index.shape(), x.dtype(), x.device());
  backend::gather(x, d, index, out);
  const Shape xshape = x.shape();
  autodiff::record(OpKind::gather, {&x}, out, [xshape, d, index] {
    return [xshape, d, index](const Tensor& g, autodiff::InputGrads& gi) {
      if (gi.create_graph()) return gi.set(0, scatter_add(zeros(xshape, g.dtype(), g.device()), d, index, g));
      Tensor dx = zeros(xshape, g.dtype(), g.device());
      backend::scatter_add(ops::dense(g), d, index, dx);
      gi.set(0, dx);
    };
  });
  return out;
}

Tensor scatter_add(const Tensor& x_in, int dim, const Tensor& index_in, const Tensor& src_in) {
  constexpr const char* op = "scatter_add";
  ops::check_defined(op, {&x_in, &index_in, &src_in});
  ops::check_same_device(op, {&x_in, &index_in, &src_in});
  check_index_dtype(op, index_in);
  if (x_in.ndim() == 0 || index_in.ndim() != x_in.ndim() || src_in.ndim() != x_in.ndim())
    throw ShapeError(std::string(op) + ": expected input, index and src of one rank (at least 1), got " +
                     ops::describe(x_in) + ", " + ops::describe(index_in) + " and " + ops::describe(src_in));
  const int d = normalize_axis(dim, x_in.ndim(), op);
  for (int k = 0; k < x_in.ndim(); ++k)
    if ((k != d && index_in.shape()[k] > x_in.shape()[k]) || index_in.shape()[k] > src_in.shape()[k])
      throw ShapeError(std::string(op) + ": index " + ops::describe(index_in) + " is larger than src " +
                       ops::describe(src_in) + " or the input " + ops::describe(x_in) + " along dimension " +
                       std::to_string(k));
  // Different dtypes only where autocast will promote both to one.
  const DType xt = x_in.dtype(), st = src_in.dtype();
  if (xt != st && !(is_floating_point(xt) && is_floating_point(st) && xt != DType::float64 &&
                    st != DType::float64 && amp::detail::autocast_active()))
    throw DTypeError(std::string(op) + ": expected src of the input's dtype, got " + ops::describe(src_in) +
                     " for " + ops::describe(x_in));
  const Tensor index = ops::dense(index_in);
  backend::check_indices(op, index, x_in.shape()[d],
                         "dimension " + std::to_string(d) + " of " + ops::describe(x_in));
  Tensor x = x_in, src = src_in;
  amp::autocast_inputs(OpKind::scatter_add, {&x, &src});
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  backend::copy(x, out);
  backend::scatter_add(ops::dense(leading_block(src, index.shape())), d, index, out);
  const Shape sshape = src.shape();
  autodiff::record(OpKind::scatter_add, {&x, &src}, out, [sshape, d, index] {
    return [sshape, d, index](const Tensor& g, autodiff::InputGrads& gi) {
      if (gi.create_graph()) {  // a src larger than index: the gathered block zero-padded to src's shape
        if (gi.needs(0)) gi.set(0, g);
        if (gi.needs(1)) {
          const Tensor part = gather(g, d, index);
          std::vector<int64_t> pads;
          for (int k = sshape.ndim() - 1; k >= 0; --k) pads.insert(pads.end(), {0, sshape[k] - index.shape()[k]});
          gi.set(1, sshape == index.shape() ? part : pad(part, pads));
        }
        return;
      }
      if (gi.needs(0)) gi.set(0, g);
      if (gi.needs(1)) {
        Tensor part = empty(index.shape(), g.dtype(), g.device());
        backend::gather(g, d, index, part);
        if (sshape == index.shape()) {
          gi.set(1, part);
        } else {
          Tensor ds = zeros(sshape, g.dtype(), g.device());
          backend::copy(part, leading_block(ds, index.shape()));
          gi.set(1, ds);
        }
      }
    };
  });
  return out;
}

Tensor index_put(const Tensor& x_in, const std::vector<Tensor>& indices, const Tensor& values_in,
                 IndexPutOptions options) {
  constexpr const char* op = "index_put";
  ops::check_defined(op, {&x_in, &values_in});
  ops::check_same_device(op, {&x_in, &values_in});
  const int k = static_cast<int>(indices.size());
  if (k == 0 || k > x_in.ndim())
    throw ShapeError(std::string(op) + ": expected 1 to " + std::to_string(x_in.ndim()) +
                     " index tensors (one per leading dimension) for " + ops::describe(x_in) + ", got " +
                     std::to_string(k));
  Shape b;  // the index tensors broadcast together
  for (int j = 0; j < k; ++j) {
    const Tensor& idx = indices[static_cast<size_t>(j)];
    ops::check_defined(op, {&idx});
    ops::check_same_device(op, {&x_in, &idx});
    check_index_dtype(op, idx);
    b = j == 0 ? idx.shape() : broadcast_shapes(b, idx.shape(), op);
  }
  Shape target = b;  // B + x.shape[k:]
  int64_t inner = 1;
  for (int d = k; d < x_in.ndim(); ++d) {
    if (target.ndim() == Shape::kMaxDims)
      throw ShapeError(std::string(op) + ": indices of shape " + to_string(b) + " and " + ops::describe(x_in) +
                       " give too many dimensions");
    target.push_back(x_in.shape()[d]);
    inner *= x_in.shape()[d];
  }
  if (values_in.ndim() > target.ndim() || broadcast_shapes(values_in.shape(), target, op) != target)
    throw ShapeError(std::string(op) + ": values " + ops::describe(values_in) + " do not broadcast to " +
                     to_string(target) + " (the indices' shape " + to_string(b) + " + the indexed tensor " +
                     ops::describe(x_in) + "'s trailing dimensions)");
  const DType xt = x_in.dtype(), vt = values_in.dtype();
  if (xt != vt && !(is_floating_point(xt) && is_floating_point(vt) && xt != DType::float64 &&
                    vt != DType::float64 && amp::detail::autocast_active()))
    throw DTypeError(std::string(op) + ": expected values of the input's dtype, got " + ops::describe(values_in) +
                     " for " + ops::describe(x_in));
  // Row numbers of x seen as [N, inner] (N = the leading k extents),
  // computed where x lives; a bad index is reported before anything is
  // written on the CPU, at the next host sync on a device.
  const int64_t m_count = b.numel();
  std::vector<Tensor> dense_indices;
  Shape extents;
  int64_t n_rows = 1;
  for (int j = 0; j < k; ++j) {
    extents.push_back(x_in.shape()[j]);
    n_rows *= x_in.shape()[j];
    dense_indices.push_back(ops::dense(broadcast_view(indices[static_cast<size_t>(j)], b)));
  }
  const Tensor rows = empty(Shape{m_count}, DType::int64, x_in.device());
  backend::index_put_rows(dense_indices, extents, ops::describe(x_in), rows);

  Tensor x = x_in, values = values_in;
  amp::autocast_inputs(OpKind::index_put, {&x, &values});
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  backend::copy(x, out);
  backend::index_put(ops::dense(broadcast_view(values, target)), rows, options.accumulate, out);
  const Shape xshape = x.shape(), vshape = values.shape();
  const bool accumulate = options.accumulate;
  autodiff::record(OpKind::index_put, {&x, &values}, out, [xshape, vshape, target, n_rows, inner, rows, accumulate] {
    return [xshape, vshape, target, n_rows, inner, rows, accumulate](const Tensor& g, autodiff::InputGrads& gi) {
      (void)gi.create_graph();  // tracked ops only: the same code serves both paths
      const Tensor g2 = reshape(g, Shape{n_rows, inner});
      if (gi.needs(0)) gi.set(0, accumulate ? g : reshape(zero_rows(g2, rows), xshape));
      if (gi.needs(1)) gi.set(1, sum_to(reshape(index_select(g2, 0, rows), target), vshape));
    };
  });
  return out;
}

}  // namespace mixgrad::F
