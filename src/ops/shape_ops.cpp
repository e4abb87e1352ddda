// Shape and type ops. Views (reshape of a contiguous tensor, narrow,
// transpose, permute, squeeze, unsqueeze, broadcast_to, detach) share the
// input's storage; their backward is the inverse reshaping of the gradient.
#include "mixgrad/ops/shape_ops.hpp"

#include "mixgrad/ops/creation.hpp"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <optional>

#include "backend/copy.hpp"
#include "core/sizes.hpp"
#include "core/view.hpp"
#include "hooks/cast_tally.hpp"
#include "mixgrad/ops/reduction.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

Shape infer_shape(const Shape& requested, int64_t numel, const Tensor& x) {
  Shape s = requested;
  int infer = -1;
  for (int i = 0; i < s.ndim(); ++i) {
    if (s[i] == -1) {
      if (infer >= 0) throw ShapeError("reshape: more than one -1 in " + to_string(requested));
      infer = i;
      s[i] = 1;  // counted as 1 until inferred
    }
  }
  for (int i = 0; i < s.ndim(); ++i)
    if (s[i] < 0) throw ShapeError("reshape: negative extent in " + to_string(requested) + " for " + ops::describe(x));
  // [2^62 + 1, 4] must not wrap around to the 4 elements of the input.
  int64_t known;
  if (!sizes::span(s, known))
    throw ShapeError("reshape: cannot reshape " + ops::describe(x) + " to " + to_string(requested) +
                     ": more elements than fit in int64");
  for (int64_t d : s)
    if (d == 0) known = 0;
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      throw ShapeError("reshape: cannot reshape " + ops::describe(x) + " to " + to_string(requested));
    s[infer] = numel / known;
  }
  if (s.numel() != numel)
    throw ShapeError("reshape: cannot reshape " + ops::describe(x) + " to " + to_string(requested));
  return s;
}

/// Strides that show x's elements, in x's row-major order, as `target`; none
/// when no strides can (the view would have to jump back). x's dims are cut
/// into chunks whose elements follow each other at one base stride (each
/// dim's stride the product of the next one's extent and stride; extent-1
/// dims join any chunk); target's dims must then fill those chunks exactly,
/// each chunk from its base stride up. So a dim with unit stride splits
/// ([N, L, E] with rows 3E apart -> [N, L, H, E/H]) and merges of dims that
/// follow each other stay views, as PyTorch's reshape / view do.
std::optional<Shape> view_strides(const Tensor& x, const Shape& target) {
  const Shape& ext = x.shape();
  const Shape& st = x.strides();
  if (x.numel() == 0 || x.ndim() == 0) return contiguous_strides(target);
  Shape out = contiguous_strides(target);
  int v = target.ndim() - 1;
  int64_t base = st[x.ndim() - 1], chunk = 1, filled = 1;
  for (int d = x.ndim() - 1; d >= 0; --d) {
    chunk *= ext[d];
    const bool chunk_ends = d == 0 || (ext[d - 1] != 1 && st[d - 1] != chunk * base);
    if (!chunk_ends) continue;
    while (v >= 0 && (filled < chunk || target[v] == 1)) {
      out[v] = filled * base;
      filled *= target[v];
      --v;
    }
    if (filled != chunk) return std::nullopt;
    if (d > 0) {
      base = st[d - 1];
      chunk = 1;
      filled = 1;
    }
  }
  if (v != -1) return std::nullopt;
  return out;
}

}  // namespace

Tensor reshape(const Tensor& x, const Shape& shape) {
  ops::check_defined("reshape", {&x});
  const Shape target = infer_shape(shape, x.numel(), x);
  if (target == x.shape()) return x;
  Tensor out;
  if (const std::optional<Shape> strides = view_strides(x, target)) {  // a view
    out = view::make(x, target, *strides, x.impl()->offset);
  } else {  // a copy, not a recorded clone: this op's own node covers it
    Tensor c = empty(x.shape(), x.dtype(), x.device());
    backend::copy(x, c);
    out = view::make(c, target, contiguous_strides(target), 0);
  }
  autodiff::record(OpKind::reshape, {&x}, out, [&] {
    return [in_shape = x.shape()](const Tensor& g, autodiff::InputGrads& gi) {
      (void)gi.create_graph();  // F:: ops: differentiable as written
      gi.set(0, reshape(g, in_shape));
    };
  });
  return out;
}

Tensor flatten(const Tensor& x, int start_dim, int end_dim) {
  ops::check_defined("flatten", {&x});
  if (x.ndim() == 0) return reshape(x, Shape{1});
  const int s = normalize_axis(start_dim, x.ndim(), "flatten");
  const int e = normalize_axis(end_dim, x.ndim(), "flatten");
  if (s > e) throw ShapeError("flatten: start_dim " + std::to_string(start_dim) + " after end_dim " + std::to_string(end_dim));
  Shape shape;
  for (int i = 0; i < s; ++i) shape.push_back(x.shape()[i]);
  int64_t n = 1;  // a product of the input's extents: within its (checked) element count
  for (int i = s; i <= e; ++i) n *= x.shape()[i];
  shape.push_back(n);
  for (int i = e + 1; i < x.ndim(); ++i) shape.push_back(x.shape()[i]);
  return reshape(x, shape);
}

Tensor permute(const Tensor& x, const std::vector<int>& dims) {
  ops::check_defined("permute", {&x});
  if (static_cast<int>(dims.size()) != x.ndim())
    throw ShapeError("permute: " + std::to_string(dims.size()) + " dims for " + ops::describe(x));
  std::vector<int> perm(dims.size());
  std::vector<bool> seen(dims.size(), false);
  Shape shape, strides;
  for (size_t i = 0; i < dims.size(); ++i) {
    perm[i] = normalize_axis(dims[i], x.ndim(), "permute");
    if (seen[perm[i]]) throw ShapeError("permute: repeated dim in permutation of " + ops::describe(x));
    seen[perm[i]] = true;
    shape.push_back(x.shape()[perm[i]]);
    strides.push_back(x.strides()[perm[i]]);
  }
  Tensor out = view::make(x, shape, strides, x.impl()->offset);
  autodiff::record(OpKind::permute, {&x}, out, [&] {
    return [perm](const Tensor& g, autodiff::InputGrads& gi) {
      std::vector<int> inverse(perm.size());
      for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int>(i);
      (void)gi.create_graph();  // F:: ops: differentiable as written
      gi.set(0, permute(g, inverse));
    };
  });
  return out;
}

Tensor transpose(const Tensor& x, int dim0, int dim1) {
  ops::check_defined("transpose", {&x});
  std::vector<int> dims(x.ndim());
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[normalize_axis(dim0, x.ndim(), "transpose")], dims[normalize_axis(dim1, x.ndim(), "transpose")]);
  return permute(x, dims);
}

Tensor narrow(const Tensor& x, int dim, int64_t start, int64_t length) {
  ops::check_defined("narrow", {&x});
  const int d = normalize_axis(dim, x.ndim(), "narrow");
  const int64_t extent = x.shape()[d];
  if (start < 0 && start >= -extent) start += extent;
  // length > extent - start, not start + length > extent: the sum can overflow.
  if (start < 0 || start > extent || length < 0 || length > extent - start)
    throw ShapeError("narrow: start " + std::to_string(start) + " and length " + std::to_string(length) +
                     " out of range for dim " + std::to_string(dim) + " of " + ops::describe(x));
  Shape shape = x.shape();
  shape[d] = length;
  Tensor out = view::make(x, shape, x.strides(), x.impl()->offset + start * x.strides()[d]);
  autodiff::record(OpKind::narrow, {&x}, out, [&] {
    return [in_shape = x.shape(), d, start](const Tensor& g, autodiff::InputGrads& gi) {
      if (gi.create_graph()) {  // g between zero blocks, as tracked ops
        std::vector<Tensor> parts;
        Shape block = in_shape;
        if (start > 0) {
          block[d] = start;
          parts.push_back(zeros(block, g.dtype(), g.device()));
        }
        parts.push_back(g);
        if (const int64_t after = in_shape[d] - start - g.shape()[d]; after > 0) {
          block[d] = after;
          parts.push_back(zeros(block, g.dtype(), g.device()));
        }
        gi.set(0, parts.size() == 1 ? g : concat(parts, d));
        return;
      }
      gi.set_block(0, g, d, start);  // the walk adds g into its block: no zeros around it
    };
  });
  return out;
}

namespace {

// concat after autocast. Mixed dtypes join in the widest of them, autocast
// or not (as torch.cat), so autocast's table entry for concat and stack is
// what decides only where it asks for more than promotion.
Tensor join(OpKind op, std::vector<Tensor> xs, int axis) {
  DType dtype = xs[0].dtype();
  for (const Tensor& t : xs) dtype = promote_types(dtype, t.dtype());
  for (Tensor& t : xs) if (t.dtype() != dtype) t = astype(t, dtype);
  const int a = normalize_axis(axis, xs[0].ndim(), "concat");
  Shape shape = xs[0].shape();
  int64_t total = 0;
  for (const Tensor& t : xs) {
    bool ok = t.ndim() == shape.ndim() && t.device() == xs[0].device();
    for (int d = 0; ok && d < shape.ndim(); ++d) ok = d == a || t.shape()[d] == shape[d];
    if (!ok) throw ShapeError("concat: cannot join " + ops::describe(xs[0]) + " and " + ops::describe(t) + " on axis " + std::to_string(axis));
    total = sizes::add(total, t.shape()[a], "concat", [&] {
      return "joining " + std::to_string(xs.size()) + " tensors like " + ops::describe(t) + " on axis " +
             std::to_string(axis);
    });
  }
  shape[a] = total;
  sizes::nbytes(shape, dtype, "concat");
  Tensor out = empty(shape, dtype, xs[0].device());
  std::vector<int64_t> starts;
  int64_t at = 0;
  for (const Tensor& t : xs) {
    starts.push_back(at);
    Shape part = shape;
    part[a] = t.shape()[a];
    backend::copy(t, view::make(out, part, out.strides(), at * out.strides()[a]));
    at += t.shape()[a];
  }
  std::vector<const Tensor*> inputs;
  for (const Tensor& t : xs) inputs.push_back(&t);
  autodiff::record(op, inputs, out, [&] {
    std::vector<int64_t> lengths;
    for (const Tensor& t : xs) lengths.push_back(t.shape()[a]);
    return autodiff::BackwardFn([a, starts, lengths](const Tensor& g, autodiff::InputGrads& gi) {
      (void)gi.create_graph();  // F:: ops: differentiable as written
      for (size_t i = 0; i < starts.size(); ++i)
        if (gi.needs(i)) gi.set(i, narrow(g, a, starts[i], lengths[i]));
    });
  });
  return out;
}

void check_inputs(const char* op, const std::vector<Tensor>& xs) {
  if (xs.empty()) throw ShapeError(std::string(op) + ": no tensors");
  for (size_t i = 0; i < xs.size(); ++i)
    if (!xs[i].defined()) throw StateError(std::string(op) + ": input " + std::to_string(i) + " is undefined");
}

}  // namespace

Tensor concat(const std::vector<Tensor>& xs_in, int axis) {
  check_inputs("concat", xs_in);
  std::vector<Tensor> xs = xs_in;
  amp::autocast_inputs(OpKind::concat, xs);
  return join(OpKind::concat, std::move(xs), axis);
}

Tensor stack(const std::vector<Tensor>& xs_in, int axis) {
  check_inputs("stack", xs_in);
  const int a = normalize_axis(axis, xs_in[0].ndim() + 1, "stack");
  for (const Tensor& t : xs_in)
    if (t.shape() != xs_in[0].shape())
      throw ShapeError("stack: shapes differ: " + ops::describe(xs_in[0]) + " and " + ops::describe(t));
  std::vector<Tensor> xs = xs_in;
  amp::autocast_inputs(OpKind::stack, xs);
  for (Tensor& t : xs) t = unsqueeze(t, a);
  return join(OpKind::stack, std::move(xs), a);
}

Tensor squeeze(const Tensor& x) {
  ops::check_defined("squeeze", {&x});
  Shape shape;
  for (int64_t d : x.shape()) if (d != 1) shape.push_back(d);
  return reshape(x, shape);
}

Tensor squeeze(const Tensor& x, int dim) {
  ops::check_defined("squeeze", {&x});
  const int d = normalize_axis(dim, x.ndim(), "squeeze");
  if (x.shape()[d] != 1) return x;
  Shape shape = x.shape();
  shape.erase(d);
  return reshape(x, shape);
}

Tensor unsqueeze(const Tensor& x, int dim) {
  ops::check_defined("unsqueeze", {&x});
  const int d = normalize_axis(dim, x.ndim() + 1, "unsqueeze");
  Shape shape = x.shape();
  shape.insert(d, 1);
  Shape strides = x.strides();
  // Any stride serves a dim of extent 1; this one keeps a contiguous input
  // contiguous. Checked: a view's stride times its extent need not be bounded
  // by its storage.
  strides.insert(d, d < x.ndim() ? sizes::mul(x.strides()[d], x.shape()[d], "unsqueeze",
                                              [&] { return "the strides of " + ops::describe(x); })
                                 : 1);
  Tensor out = view::make(x, shape, strides, x.impl()->offset);
  autodiff::record(OpKind::unsqueeze, {&x}, out, [&] {
    return [in_shape = x.shape()](const Tensor& g, autodiff::InputGrads& gi) {
      (void)gi.create_graph();  // F:: ops: differentiable as written
      gi.set(0, reshape(g, in_shape));
    };
  });
  return out;
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  ops::check_defined("broadcast_to", {&x});
  if (x.shape() == shape) return x;
  if (broadcast_shapes(x.shape(), shape, "broadcast_to") != shape)
    throw ShapeError("broadcast_to: cannot broadcast " + ops::describe(x) + " to " + to_string(shape));
  Shape strides;
  const int lead = shape.ndim() - x.ndim();
  for (int i = 0; i < shape.ndim(); ++i) {
    const int j = i - lead;
    strides.push_back(j < 0 || x.shape()[j] == 1 ? 0 : x.strides()[j]);
  }
  Tensor out = view::make(x, shape, strides, x.impl()->offset);
  autodiff::record(OpKind::broadcast_to, {&x}, out, [&] {
    return [in_shape = x.shape()](const Tensor& g, autodiff::InputGrads& gi) {
      (void)gi.create_graph();  // F:: ops: differentiable as written
      gi.set(0, sum_to(g, in_shape));
    };
  });
  return out;
}

Tensor astype(const Tensor& x, DType dtype) {
  ops::check_defined("astype", {&x});
  if (x.dtype() == dtype) return x;
  const bool tally = amp::detail::cast_tally_active();  // a benchmark's CastTally, mostly none
  const auto start = tally ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  Tensor out = ops::empty_for(x.shape(), dtype, x.device(), {&x});  // a channels-last x stays so
  backend::copy(x, out);
  if (tally)
    amp::detail::count_cast(static_cast<uint64_t>(x.numel()),
                            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (is_floating_point(dtype) && is_floating_point(x.dtype())) {
    autodiff::record(OpKind::astype, {&x}, out, [&] {
      return [in = x.dtype()](const Tensor& g, autodiff::InputGrads& gi) {
        (void)gi.create_graph();  // F:: ops: differentiable as written
        gi.set(0, astype(g, in));
      };
    });
  }
  return out;
}

Tensor detach(const Tensor& x) {
  ops::check_defined("detach", {&x});
  return view::make(x, x.shape(), x.strides(), x.impl()->offset);
}

}  // namespace mixgrad::F
