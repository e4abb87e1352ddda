// Reductions. (Placeholder: only sum_to so far; the reduction family lands next.)
#include "mixgrad/ops/reduction.hpp"

#include "backend/copy.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  if (broadcast_shapes(shape, x.shape(), "sum_to") != x.shape())
    throw ShapeError("sum_to: cannot sum " + ops::describe(x) + " to " + to_string(shape));
  Tensor out = empty(shape, x.dtype(), x.device());
  backend::fill(out, 0.0);
  // Serial: the broadcast view has stride 0 on summed dims.
  const Shape xs = x.shape();
  Shape st;
  const int lead = xs.ndim() - shape.ndim();
  const Shape cs = contiguous_strides(shape);
  for (int i = 0; i < xs.ndim(); ++i) {
    const int j = i - lead;
    st.push_back(j < 0 || shape[j] == 1 ? 0 : cs[j]);
  }
  Tensor acc_view(std::make_shared<TensorImpl>(out.impl()->storage, 0, xs, st, out.dtype()));
  const Tensor xc = x.contiguous();
  const int64_t n = xs.numel();
  const Shape xcs = contiguous_strides(xs);
  visit_dtype(x.dtype(), [&]<class T>() {
    const T* src = xc.data<T>();
    T* dst = out.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      int64_t off = 0, rem = i;
      for (int d = 0; d < xs.ndim(); ++d) {
        off += (rem / xcs[d]) * st[d];
        rem %= xcs[d];
      }
      dst[off] = static_cast<T>(static_cast<double>(dst[off]) + static_cast<double>(src[i]));
    }
  });
  autodiff::record({&x}, out, [xshape = x.shape()](const Tensor& g, autodiff::InputGrads& gi) {
    gi.set(0, broadcast_to(g, xshape).contiguous());
  });
  return out;
}

}  // namespace mixgrad::F
