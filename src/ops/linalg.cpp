// F::matmul and F::linear. Both reduce to one backend product
// (backend::matmul) on views: 1-d operands become [1, k] / [k, 1], batch dims
// are padded to a common rank and broadcast by the backend, and a batched
// operand times an unbatched one is folded into a single 2-d product, which is
// what oneDNN (and the fallback) run fastest. Gradients are products too;
// where a batch dim was broadcast the gradient is summed back over it.
#include "mixgrad/ops/linalg.hpp"

#include "backend/copy.hpp"
#include "backend/matmul.hpp"
#include "backend/reduction.hpp"
#include "core/sizes.hpp"
#include "core/view.hpp"
#include "hooks/fp8_products.hpp"
#include "hooks/kept_results.hpp"
#include "mixgrad/ops/reduction.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

// t viewed with `lead` extent-1 dims in front (strides chosen as if contiguous there).
Tensor pad_front(const Tensor& t, int lead) {
  if (lead == 0) return t;
  Shape shape = t.shape(), strides = t.strides();
  for (int i = 0; i < lead; ++i) {
    const int64_t next = shape.ndim() > 0 ? std::max<int64_t>(1, strides[0] * shape[0]) : 1;
    shape.insert(0, 1);
    strides.insert(0, next);
  }
  return view::make(t, shape, strides);
}

// t viewed with an extent-1 dim inserted at `pos`.
Tensor insert_unit(const Tensor& t, int pos) {
  Shape shape = t.shape(), strides = t.strides();
  const int64_t st = pos < shape.ndim() ? std::max<int64_t>(1, strides[pos] * shape[pos]) : 1;
  shape.insert(pos, 1);
  strides.insert(pos, st);
  return view::make(t, shape, strides);
}

// The last two dims swapped (a view).
Tensor swap_last(const Tensor& t) {
  Shape shape = t.shape(), strides = t.strides();
  const int r = t.ndim();
  std::swap(shape[r - 1], shape[r - 2]);
  std::swap(strides[r - 1], strides[r - 2]);
  return view::make(t, shape, strides);
}

int64_t batch_numel(const Shape& s) {
  int64_t n = 1;
  for (int i = 0; i < s.ndim() - 2; ++i) n *= s[i];
  return n;
}

// The leading dims [0, r-1) of t merged into one, as a view, when their
// strides allow (a contiguous tensor always does): [b..., m, k] -> [B*m, k].
bool fold_rows(const Tensor& t, Tensor& out) {
  const int r = t.ndim();
  int64_t rows = 1;
  for (int d = 0; d < r - 1; ++d) rows *= t.shape()[d];
  int64_t expect = t.strides()[r - 2];
  for (int d = r - 2; d >= 0; --d) {
    if (t.shape()[d] != 1 && t.strides()[d] != expect) return false;
    expect = t.shape()[d] == 1 ? expect : t.strides()[d] * t.shape()[d];
  }
  out = view::make(t, Shape{rows, t.shape()[r - 1]}, Shape{t.strides()[r - 2], t.strides()[r - 1]});
  return true;
}

// a[..., m, k] · b[..., k, n] for operands of the same rank whose batch dims
// broadcast; the result is contiguous with the broadcast batch dims. Not recorded.
Tensor product(const Tensor& a, const Tensor& b, DType dtype) {
  const int r = a.ndim();
  Shape shape;
  for (int d = 0; d < r - 2; ++d) shape.push_back(std::max(a.shape()[d], b.shape()[d]));
  shape.push_back(a.shape()[r - 2]);
  shape.push_back(b.shape()[r - 1]);
  Tensor out = empty(shape, dtype, a.device());
  Tensor a2;
  if (r > 2 && batch_numel(b.shape()) == 1 && fold_rows(a, a2)) {
    const Tensor b2 =
        view::make(b, Shape{b.shape()[r - 2], b.shape()[r - 1]}, Shape{b.strides()[r - 2], b.strides()[r - 1]});
    const Shape out2{a2.shape()[0], shape[r - 1]};
    backend::matmul(a2, b2, Tensor(), view::make(out, out2, contiguous_strides(out2)));
  } else {
    backend::matmul(a, b, Tensor(), out);
  }
  return out;
}

// Sums a batched gradient [out_batch..., x, y] over the batch dims that were
// broadcast in the operand of shape `target` (same rank), in float32 for the
// 16-bit dtypes (the sum must not round at every step).
Tensor reduce_batch(const Tensor& g, const Shape& target) {
  if (g.shape() == target) return g;
  if (!is_low_precision(g.dtype())) return sum_to(g, target);
  return astype(sum_to(astype(g, DType::float32), target), g.dtype());
}

void check_dtypes(const char* op, std::initializer_list<const Tensor*> ts) {
  const Tensor* first = nullptr;
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    ops::check_floating(op, *t);
    if (!first) first = t;
    else if (t->dtype() != first->dtype())
      throw DTypeError(std::string(op) + ": dtypes differ: " + ops::describe(*first) + " and " + ops::describe(*t));
  }
}

// The dtype of a product's result after autocast: `mixed` where autocast left
// float32 operands beside 16-bit ones (amp::autocast_product_inputs), whose
// operands must then be that dtype or float32; else the one dtype of all.
DType result_dtype(const char* op, std::optional<DType> mixed, std::initializer_list<const Tensor*> ts) {
  if (!mixed) {
    check_dtypes(op, ts);
    return (*ts.begin())->dtype();
  }
  ops::check_mixed_operands(op, *mixed, ts);
  return *mixed;
}

// A recorded product for create_graph of operands autocast left in mixed
// dtypes, computed in float32 as the forward was and returned as `dtype`.
Tensor recorded_product(const Tensor& a, const Tensor& b, DType dtype) {
  if (a.dtype() == dtype && b.dtype() == dtype) return F::matmul(a, b);
  amp::detail::AutocastOff off;
  return astype(F::matmul(astype(a, DType::float32), astype(b, DType::float32)), dtype);
}

// matmul's operand checks and result: its broadcast batch dims, its shape
// (the vectors' unit dims dropped) and the common rank of the operands' views.
struct MatmulShape {
  Shape batch, out;
  int rank;
};

MatmulShape matmul_shape(const Tensor& a_in, const Tensor& b_in) {
  ops::check_defined("matmul", {&a_in, &b_in});
  ops::check_same_device("matmul", {&a_in, &b_in});
  ops::check_floating("matmul", a_in);
  ops::check_floating("matmul", b_in);
  if (a_in.ndim() == 0 || b_in.ndim() == 0)
    throw ShapeError("matmul: operands need at least 1 dim, got " + ops::describe(a_in) + " and " +
                     ops::describe(b_in));
  const bool a_vec = a_in.ndim() == 1, b_vec = b_in.ndim() == 1;
  const int64_t ka = a_in.shape()[a_in.ndim() - 1];
  const int64_t kb = b_vec ? b_in.shape()[0] : b_in.shape()[b_in.ndim() - 2];
  if (ka != kb)
    throw ShapeError("matmul: inner dimensions differ (" + std::to_string(ka) + " vs " + std::to_string(kb) +
                     "): " + ops::describe(a_in) + " x " + ops::describe(b_in));
  // Batch dims (all but the matrix dims) must broadcast.
  MatmulShape m{{}, {}, std::max({a_in.ndim(), b_in.ndim(), 2})};
  for (int d = 0; d < m.rank - 2; ++d) {
    const int da = d - (m.rank - a_in.ndim()), db = d - (m.rank - b_in.ndim());
    const int64_t ea = da >= 0 && !a_vec ? a_in.shape()[da] : 1;
    const int64_t eb = db >= 0 && !b_vec ? b_in.shape()[db] : 1;
    if (ea != eb && ea != 1 && eb != 1)
      throw ShapeError("matmul: batch dimensions do not broadcast: " + ops::describe(a_in) + " x " +
                       ops::describe(b_in));
    m.batch.push_back(std::max(ea, eb));
  }
  // Two empty operands ([2^40, 0] x [0, 2^40]) can ask for a result too large to count.
  m.out = m.batch;
  if (!a_vec) m.out.push_back(a_in.shape()[a_in.ndim() - 2]);
  if (!b_vec) m.out.push_back(b_in.shape()[b_in.ndim() - 1]);
  sizes::numel(m.out, "matmul");
  if (a_in.dtype() != b_in.dtype() && !amp::detail::autocast_active()) check_dtypes("matmul", {&a_in, &b_in});
  return m;
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  const MatmulShape m = matmul_shape(a_in, b_in);
  if (amp::detail::fp8_active()) return amp::detail::fp8_matmul(a_in, b_in);
  const int rank = m.rank;
  const Shape& batch = m.batch;
  const Shape& out_shape = m.out;
  const bool a_vec = a_in.ndim() == 1, b_vec = b_in.ndim() == 1;
  Tensor a = a_in, b = b_in;
  const std::optional<DType> mixed =
      amp::autocast_product_inputs(rank > 2 ? OpKind::batched_matmul : OpKind::matmul, {&a, &b});
  const DType dtype = result_dtype("matmul", mixed, {&a, &b});
  // Mixed operands compute in float32: the gradient is widened once for
  // both of its products instead of once in each.
  const DType g_dtype = mixed ? DType::float32 : dtype;
  sizes::nbytes(out_shape, dtype, "matmul");

  // Operands as [batch..., m, k] and [batch..., k, n] views of the same rank.
  const Tensor a_full = pad_front(a_vec ? insert_unit(a, 0) : a, rank - std::max(a.ndim(), 2));
  const Tensor b_full = pad_front(b_vec ? insert_unit(b, 1) : b, rank - std::max(b.ndim(), 2));
  Shape full_shape = batch;
  full_shape.push_back(a_full.shape()[rank - 2]);
  full_shape.push_back(b_full.shape()[rank - 1]);
  const Tensor out_full = autodiff::keep_or_compute(OpKind::matmul, full_shape, dtype,
                                                    [&] { return product(a_full, b_full, dtype); });
  const Tensor out = view::make(out_full, out_shape, contiguous_strides(out_shape));

  autodiff::record(OpKind::matmul, {&a, &b}, out, [&] {
    return [a, b, a_full, b_full, g_dtype, full_shape = out_full.shape(), a_shape = a.shape(), b_shape = b.shape()](
               const Tensor& g_in, autodiff::InputGrads& gi) {
      if (gi.create_graph()) {  // the same products as tracked ops on the forward's a and b
        const Tensor a2 = a.ndim() == 1 ? F::unsqueeze(a, 0) : a;
        const Tensor b2 = b.ndim() == 1 ? F::unsqueeze(b, 1) : b;
        Shape g2_shape = full_shape;  // g with the vectors' unit dims, batch dims as broadcast
        const Tensor g2 = F::reshape(g_in, g2_shape);
        if (gi.needs(0)) {
          const Tensor ga = recorded_product(g2, F::transpose(b2, -1, -2), a.dtype());
          gi.set(0, F::reshape(F::sum_to(ga, a2.shape()), a_shape));
        }
        if (gi.needs(1)) {
          const Tensor gb = recorded_product(F::transpose(a2, -1, -2), g2, b.dtype());
          gi.set(1, F::reshape(F::sum_to(gb, b2.shape()), b_shape));
        }
        return;
      }
      const Tensor g = F::reshape(ops::dense(g_in, g_dtype), full_shape);
      if (gi.needs(0))
        gi.set(0, F::reshape(reduce_batch(product(g, swap_last(b_full), a.dtype()), a_full.shape()), a_shape));
      if (gi.needs(1)) {
        Tensor a2, g2;
        Tensor gb;
        if (batch_numel(b_full.shape()) == 1 && batch_numel(full_shape) > 1 && fold_rows(ops::dense(a_full), a2) &&
            fold_rows(ops::dense(g), g2)) {
          gb = product(swap_last(a2), g2, b.dtype());  // one [k, M]·[M, n] product instead of a batch and a sum
        } else {
          gb = reduce_batch(product(swap_last(a_full), g, b.dtype()), b_full.shape());
        }
        gi.set(1, F::reshape(gb, b_shape));
      }
    };
  });
  return out;
}

Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in) {
  ops::check_defined("linear", {&x_in, &w_in});
  ops::check_same_device("linear", {&x_in, &w_in, &b_in});
  if (x_in.ndim() < 1 || w_in.ndim() != 2 || x_in.shape()[x_in.ndim() - 1] != w_in.shape()[1])
    throw ShapeError("linear: input " + ops::describe(x_in) + " does not fit weight " + ops::describe(w_in) +
                     " (expected [..., in_features] and [out_features, in_features])");
  if (b_in.defined() && (b_in.ndim() != 1 || b_in.shape()[0] != w_in.shape()[0]))
    throw ShapeError("linear: bias " + ops::describe(b_in) + " does not fit weight " + ops::describe(w_in));
  ops::check_floating("linear", x_in);
  ops::check_floating("linear", w_in);
  if (b_in.defined()) ops::check_floating("linear", b_in);
  if (amp::detail::fp8_active()) return amp::detail::fp8_linear(x_in, w_in, b_in);
  if (!amp::detail::autocast_active()) check_dtypes("linear", {&x_in, &w_in, &b_in});
  Shape out_shape = x_in.shape();
  out_shape[out_shape.ndim() - 1] = w_in.shape()[0];
  sizes::numel(out_shape, "linear");  // an empty input and weight can ask for too large a result

  Tensor x = x_in, w = w_in, b = b_in;
  const std::optional<DType> mixed = amp::autocast_product_inputs(OpKind::linear, {&x, &w, &b});
  const DType dtype = result_dtype("linear", mixed, {&x, &w, &b});
  const DType g_dtype = mixed ? DType::float32 : dtype;  // as in matmul
  sizes::nbytes(out_shape, dtype, "linear");

  const int64_t in = w.shape()[1], out_features = w.shape()[0];
  Tensor x2;
  if (!fold_rows(x.ndim() == 1 ? insert_unit(x, 0) : x, x2)) fold_rows(ops::dense(x), x2);
  const int64_t rows = x2.shape()[0];
  const Tensor out = autodiff::keep_or_compute(OpKind::linear, out_shape, dtype, [&] {
    Tensor y = empty(out_shape, dtype, x.device());
    const Tensor w_t = swap_last(w);  // [in, out]: a transposed view, no copy
    backend::matmul(x2, w_t, b, view::make(y, Shape{rows, out_features}, Shape{out_features, 1}));
    return y;
  });

  const DType b_dtype = b.defined() ? b.dtype() : dtype;
  autodiff::record(OpKind::linear, {&x, &w, &b}, out, [&] {
    return [x, x2, w, in, out_features, rows, g_dtype, b_dtype, x_shape = x.shape()](const Tensor& g_in,
                                                                                     autodiff::InputGrads& gi) {
      if (gi.create_graph()) {  // tracked ops on the forward's x and w
        const Tensor g2 = F::reshape(g_in, Shape{rows, out_features});
        if (gi.needs(0)) gi.set(0, recorded_product(g_in, w, x.dtype()));
        if (gi.needs(1)) gi.set(1, recorded_product(F::transpose(g2, 0, 1), F::reshape(x, Shape{rows, in}), w.dtype()));
        if (gi.needs(2)) gi.set(2, astype(F::sum(g2, {0}), b_dtype));
        return;
      }
      const Tensor g = ops::dense(g_in, g_dtype);
      const Tensor g2 = view::make(g, Shape{rows, out_features}, Shape{out_features, 1});
      if (gi.needs(0)) {
        Tensor gx = empty(x_shape, x2.dtype(), x2.device());
        backend::matmul(g2, w, Tensor(), view::make(gx, Shape{rows, in}, Shape{in, 1}));
        gi.set(0, gx);
      }
      if (gi.needs(1)) {
        Tensor gw = empty(w.shape(), w.dtype(), w.device());
        backend::matmul(swap_last(g2), x2, Tensor(), gw);
        gi.set(1, gw);
      }
      if (gi.needs(2)) {
        Tensor gb = empty(Shape{out_features}, b_dtype, g.device());
        backend::sum_channels(g2, rows, out_features, 1, gb);
        gi.set(2, gb);
      }
    };
  });
  return out;
}

}  // namespace mixgrad::F
