// F::max_pool2d, F::avg_pool2d, F::adaptive_avg_pool2d, and F::max_pool1d /
// F::avg_pool1d, which run the 2-d kernels on height-1 views of their
// [N, C, L] input, and F::max_pool3d / F::avg_pool3d, which run them twice:
// over (H, W) per depth slice, then along D (a box window is separable for
// both the max and the padding-excluded mean). Pooling keeps its input's dtype under autocast. Max
// pooling's backward closure holds the backend's workspace (where each
// maximum came from) for the ordinary backward, and the input, from which a
// recorded backward finds the maxima again in a form it can gather by.
#include <memory>

#include "backend/pooling.hpp"

#include "core/sizes.hpp"
#include "core/view.hpp"
#include "mixgrad/ops/nn.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/untracked_copy.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

std::string size2(Size2 s) { return "(" + std::to_string(s.h) + ", " + std::to_string(s.w) + ")"; }

void check_4d(const char* op, const Tensor& x) {
  ops::check_defined(op, {&x});
  ops::check_floating(op, x);
  if (x.ndim() != 4) throw ShapeError(std::string(op) + ": expected input [N, C, H, W], got " + ops::describe(x));
}

// Validated window geometry and the output shape.
// `x4` is the shape the 2-d kernels see (x's own for the 2-d ops).
backend::Pool2dParams pool_params(const char* op, const Tensor& x, const Shape& x4, const Pool2dOptions& o,
                                  Shape& out_shape) {
  const Size2 kernel = o.kernel_size, padding = o.padding;
  const Size2 stride{o.stride.h == 0 ? kernel.h : o.stride.h, o.stride.w == 0 ? kernel.w : o.stride.w};
  if (kernel.h < 1 || kernel.w < 1 || stride.h < 1 || stride.w < 1 || padding.h < 0 || padding.w < 0 ||
      padding.h > kernel.h / 2 || padding.w > kernel.w / 2)
    throw ShapeError(std::string(op) + ": invalid kernel_size " + size2(kernel) + ", stride " + size2(stride) +
                     " or padding " + size2(padding) + " (padding at most half the kernel) for input " +
                     ops::describe(x));
  auto context = [&] {
    return "kernel_size " + size2(kernel) + " with padding " + size2(padding) + " on input " + ops::describe(x);
  };
  // padding <= kernel / 2, so 2 * padding fits; the sum with the input extent is checked.
  const int64_t padded_h = sizes::add(x4[2], 2 * padding.h, op, context);
  const int64_t padded_w = sizes::add(x4[3], 2 * padding.w, op, context);
  if (padded_h < kernel.h || padded_w < kernel.w)
    throw ShapeError(std::string(op) + ": kernel_size " + size2(kernel) + " larger than padded input " +
                     ops::describe(x));
  out_shape = Shape{x4[0], x4[1], (padded_h - kernel.h) / stride.h + 1, (padded_w - kernel.w) / stride.w + 1};
  // The kernels divide by the window area and estimate the work as output
  // elements times the area; neither may wrap.
  sizes::mul(sizes::numel(out_shape, op), sizes::mul(kernel.h, kernel.w, op, context), op, context);
  return {{kernel.h, kernel.w}, {stride.h, stride.w}, {padding.h, padding.w}};
}

}  // namespace

namespace {

// `t` (contiguous) seen as `shape` of the same element count, no tape entry.
Tensor as_shape(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  return view::make(t, shape, contiguous_strides(shape));
}

// Where a max pooling's maxima are, for its recorded gradient: the `argmax`
// workspace of a 2-d pass from x (x4 view, x_shape) to y (y4 view, y_shape).
struct ArgmaxMap {
  backend::MaxPoolWorkspace ws;
  backend::Pool2dParams p;
  Shape x_shape, x4, y_shape, y4;
  DType dt;
};
using ArgmaxPtr = std::shared_ptr<const ArgmaxMap>;

// In a recorded backward, max pooling's input gradient is linear in g (g
// routed to the argmax positions, which are piecewise constant in x): the
// scatter is recorded as a node on g whose backward gathers at the same
// positions, and the gather records the scatter, so max pooling is
// differentiable any number of times.
Tensor gather_from_argmax(const Tensor& gg, const ArgmaxPtr& m);

Tensor scatter_to_argmax(const Tensor& g, const ArgmaxPtr& m) {
  Tensor gx = empty(m->x_shape, m->dt, g.device());
  backend::max_pool2d_backward(as_shape(ops::dense(g, m->dt), m->y4), m->ws, as_shape(gx, m->x4), m->p);
  ops::record_linear_grad(g, gx, [m](const Tensor& gg) { return gather_from_argmax(gg, m); });
  return gx;
}

Tensor gather_from_argmax(const Tensor& gg, const ArgmaxPtr& m) {
  Tensor gy = empty(m->y_shape, m->dt, gg.device());
  backend::max_pool2d_gather(as_shape(ops::dense(gg, m->dt), m->x4), m->ws, as_shape(gy, m->y4));
  ops::record_linear_grad(gg, gy, [m](const Tensor& g) { return scatter_to_argmax(g, m); });
  return gy;
}

// The argmax map of pooling x (x4 view) into a fresh y_shape tensor, which
// is returned through `y` (a 3-d pooling's second pass reads it).
ArgmaxPtr argmax_map(const Tensor& x, const Shape& x_shape, const Shape& x4, const Shape& y_shape, const Shape& y4,
                     const backend::Pool2dParams& p, Tensor* y = nullptr) {
  Tensor out = empty(y_shape, x.dtype(), x.device());
  auto m = std::make_shared<ArgmaxMap>(ArgmaxMap{
      backend::max_pool2d_argmax(as_shape(ops::dense(x), x4), as_shape(out, y4), p), p, x_shape, x4, y_shape, y4,
      x.dtype()});
  if (y) *y = out;
  return m;
}

// Autocast, forward and tape entry of a validated pooling, run by the 2-d
// kernels on views of shape x4 / y4; y has shape y_shape. The closure holds
// x besides the workspace: a recorded backward finds the maxima again on the
// built-in path (the oneDNN workspace cannot be read by position).
Tensor run_max_pool(OpKind op, const Tensor& x_in, const Shape& x4, const Shape& y_shape, const Shape& y4,
                    const backend::Pool2dParams& p) {
  Tensor x = x_in;
  amp::autocast_inputs(op, {&x});
  Tensor y = empty(y_shape, x.dtype(), x.device());
  const backend::MaxPoolWorkspace ws = backend::max_pool2d_forward(as_shape(ops::dense(x), x4), as_shape(y, y4), p);
  autodiff::record({&x}, y, [ws, p, x, x4, y_shape, y4](const Tensor& g, autodiff::InputGrads& gi) {
    if (gi.create_graph()) {
      gi.set(0, scatter_to_argmax(g, argmax_map(x, x.shape(), x4, y_shape, y4, p)));
      return;
    }
    Tensor gx = empty(x.shape(), x.dtype(), g.device());
    backend::max_pool2d_backward(as_shape(ops::dense(g, x.dtype()), y4), ws, as_shape(gx, x4), p);
    gi.set(0, gx);
  });
  return y;
}

Tensor run_avg_pool(OpKind op, const Tensor& x_in, const Shape& x4, const Shape& y_shape, const Shape& y4,
                    const backend::Pool2dParams& p) {
  Tensor x = x_in;
  amp::autocast_inputs(op, {&x});
  Tensor y = empty(y_shape, x.dtype(), x.device());
  backend::avg_pool2d_forward(as_shape(ops::dense(x), x4), as_shape(y, y4), p);
  autodiff::record({&x}, y, [op, p, x_shape = x.shape(), x4, y_shape, y4, dt = x.dtype()](const Tensor& g,
                                                                                         autodiff::InputGrads& gi) {
    Tensor gx = empty(x_shape, dt, g.device());
    backend::avg_pool2d_backward(as_shape(ops::dense(g, dt), y4), as_shape(gx, x4), p);
    if (gi.create_graph())
      ops::record_linear_grad(g, gx, [op, x4, y_shape, y4, p](const Tensor& gg) {
        return run_avg_pool(op, gg, x4, y_shape, y4, p);
      });
    gi.set(0, gx);
  });
  return y;
}

void check_3d(const char* op, const Tensor& x) {
  ops::check_defined(op, {&x});
  ops::check_floating(op, x);
  if (x.ndim() != 3) throw ShapeError(std::string(op) + ": expected input [N, C, L], got " + ops::describe(x));
}

// The 1-d window as a 2-d one of height 1: x4, the output's shape and its 4-d view.
backend::Pool2dParams pool1d_params(const char* op, const Tensor& x, const Pool1dOptions& o, Shape& x4,
                                    Shape& y_shape, Shape& y4) {
  if (o.kernel_size < 1 || o.stride < 0 || o.padding < 0 || o.padding > o.kernel_size / 2)
    throw ShapeError(std::string(op) + ": invalid kernel_size " + std::to_string(o.kernel_size) + ", stride " +
                     std::to_string(o.stride) + " or padding " + std::to_string(o.padding) +
                     " (padding at most half the kernel) for input " + ops::describe(x));
  x4 = Shape{x.shape()[0], x.shape()[1], 1, x.shape()[2]};
  const backend::Pool2dParams p = pool_params(
      op, x, x4, {.kernel_size = {1, o.kernel_size}, .stride = {1, o.stride}, .padding = {0, o.padding}}, y4);
  y_shape = Shape{y4[0], y4[1], y4[3]};
  return p;
}

std::string size3(Size3 s) {
  return "(" + std::to_string(s.d) + ", " + std::to_string(s.h) + ", " + std::to_string(s.w) + ")";
}

// The two 2-d passes of a 3-d pooling: (H, W) windows on [N*C, D, H, W],
// then D windows on the result seen as [N*C, 1, D, OH*OW].
struct Pool3dPlan {
  Shape x4, mid, mid4, y4, y;
  backend::Pool2dParams hw, depth;
};

Pool3dPlan pool3d_plan(const char* op, const Tensor& x, const Pool3dOptions& o) {
  ops::check_defined(op, {&x});
  ops::check_floating(op, x);
  if (x.ndim() != 5) throw ShapeError(std::string(op) + ": expected input [N, C, D, H, W], got " + ops::describe(x));
  const Size3 k = o.kernel_size, pad = o.padding;
  const Size3 st{o.stride.d == 0 ? k.d : o.stride.d, o.stride.h == 0 ? k.h : o.stride.h,
                 o.stride.w == 0 ? k.w : o.stride.w};
  if (k.d < 1 || k.h < 1 || k.w < 1 || st.d < 1 || st.h < 1 || st.w < 1 || pad.d < 0 || pad.h < 0 || pad.w < 0 ||
      pad.d > k.d / 2 || pad.h > k.h / 2 || pad.w > k.w / 2)
    throw ShapeError(std::string(op) + ": invalid kernel_size " + size3(k) + ", stride " + size3(st) +
                     " or padding " + size3(pad) + " (padding at most half the kernel) for input " + ops::describe(x));
  const Shape& s = x.shape();
  // 2 * padding <= kernel, so the differences cannot wrap.
  if (s[2] < k.d - 2 * pad.d || s[3] < k.h - 2 * pad.h || s[4] < k.w - 2 * pad.w)
    throw ShapeError(std::string(op) + ": kernel_size " + size3(k) + " larger than padded input " +
                     ops::describe(x) + " with padding " + size3(pad));
  const int64_t planes = sizes::mul(s[0], s[1], op, [&] { return "input " + ops::describe(x); });
  Pool3dPlan plan;
  plan.x4 = Shape{planes, s[2], s[3], s[4]};
  plan.hw = pool_params(op, x, plan.x4, {.kernel_size = {k.h, k.w}, .stride = {st.h, st.w}, .padding = {pad.h, pad.w}},
                        plan.mid);
  plan.mid4 = Shape{planes, 1, s[2], plan.mid[2] * plan.mid[3]};
  plan.depth = pool_params(op, x, plan.mid4, {.kernel_size = {k.d, 1}, .stride = {st.d, 1}, .padding = {pad.d, 0}},
                           plan.y4);
  plan.y = Shape{s[0], s[1], plan.y4[2], plan.mid[2], plan.mid[3]};
  return plan;
}

// A 3-d pooling's two 2-d passes (Pool3dPlan) for max pooling: their
// workspaces for the ordinary backward, and the input, from which a recorded
// backward finds the maxima again (see run_max_pool).
struct MaxPasses {
  using Workspace = backend::MaxPoolWorkspace;
  Tensor x;
  Workspace hw, depth;

  static MaxPasses keep(const Tensor& x, const Pool3dOptions&) { return {x, {}, {}}; }
  static Workspace forward(const Tensor& in, const Tensor& out, const backend::Pool2dParams& p) {
    return backend::max_pool2d_forward(in, out, p);
  }
  static void backward(const Tensor& gy, const Workspace& ws, const Tensor& gx, const backend::Pool2dParams& p) {
    backend::max_pool2d_backward(gy, ws, gx, p);
  }
  const Shape& x_shape() const { return x.shape(); }
  DType dtype() const { return x.dtype(); }
  Tensor recorded_grad(const Tensor& g, const Pool3dPlan& plan) const {
    Tensor mid_again;
    const ArgmaxPtr hw_map = argmax_map(x, x.shape(), plan.x4, plan.mid, plan.mid, plan.hw, &mid_again);
    const ArgmaxPtr depth_map = argmax_map(mid_again, plan.mid, plan.mid4, plan.y, plan.y4, plan.depth);
    return scatter_to_argmax(scatter_to_argmax(g, depth_map), hw_map);
  }
};

// The same for average pooling, whose gradient is linear: it keeps only the
// input's shape and dtype, and records its backward as avg_pool3d's adjoint.
struct AvgPasses {
  struct Workspace {};
  Shape shape;
  DType dt;
  Pool3dOptions options;
  Workspace hw, depth;

  static AvgPasses keep(const Tensor& x, const Pool3dOptions& o) { return {x.shape(), x.dtype(), o, {}, {}}; }
  static Workspace forward(const Tensor& in, const Tensor& out, const backend::Pool2dParams& p) {
    backend::avg_pool2d_forward(in, out, p);
    return {};
  }
  static void backward(const Tensor& gy, const Workspace&, const Tensor& gx, const backend::Pool2dParams& p) {
    backend::avg_pool2d_backward(gy, gx, p);
  }
  const Shape& x_shape() const { return shape; }
  DType dtype() const { return dt; }
  Tensor recorded_grad(const Tensor& g, const Pool3dPlan& plan) const;
};

// The gradient of both passes, the depth pass's first.
template <class Passes>
Tensor pool3d_backward(const Passes& passes, const Tensor& g, const Pool3dPlan& plan) {
  const DType dt = passes.dtype();
  Tensor g_mid = empty(plan.mid, dt, g.device());
  Passes::backward(as_shape(ops::dense(g, dt), plan.y4), passes.depth, as_shape(g_mid, plan.mid4), plan.depth);
  Tensor gx = empty(passes.x_shape(), dt, g.device());
  Passes::backward(g_mid, passes.hw, as_shape(gx, plan.x4), plan.hw);
  return gx;
}

Tensor AvgPasses::recorded_grad(const Tensor& g, const Pool3dPlan& plan) const {
  Tensor gx = pool3d_backward(*this, g, plan);
  ops::record_linear_grad(g, gx, [o = options](const Tensor& gg) { return avg_pool3d(gg, o); });
  return gx;
}

// Validation, autocast, the two passes and the tape entry of a 3-d pooling.
template <class Passes>
Tensor pool3d(OpKind op, const char* name, const Tensor& x_in, const Pool3dOptions& options) {
  const Pool3dPlan plan = pool3d_plan(name, x_in, options);
  Tensor x = x_in;
  amp::autocast_inputs(op, {&x});
  sizes::nbytes(plan.mid, x.dtype(), name);
  sizes::nbytes(plan.y, x.dtype(), name);
  Tensor mid = empty(plan.mid, x.dtype(), x.device());
  Tensor y = empty(plan.y, x.dtype(), x.device());
  Passes passes = Passes::keep(x, options);
  passes.hw = Passes::forward(as_shape(ops::dense(x), plan.x4), mid, plan.hw);
  passes.depth = Passes::forward(as_shape(mid, plan.mid4), as_shape(y, plan.y4), plan.depth);
  autodiff::record({&x}, y, [passes, plan](const Tensor& g, autodiff::InputGrads& gi) {
    gi.set(0, gi.create_graph() ? passes.recorded_grad(g, plan) : pool3d_backward(passes, g, plan));
  });
  return y;
}

}  // namespace


Tensor max_pool2d(const Tensor& x, const Pool2dOptions& options) {
  check_4d("max_pool2d", x);
  Shape out_shape;
  const backend::Pool2dParams p = pool_params("max_pool2d", x, x.shape(), options, out_shape);
  return run_max_pool(OpKind::max_pool2d, x, x.shape(), out_shape, out_shape, p);
}

Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& options) {
  check_4d("avg_pool2d", x);
  Shape out_shape;
  const backend::Pool2dParams p = pool_params("avg_pool2d", x, x.shape(), options, out_shape);
  return run_avg_pool(OpKind::avg_pool2d, x, x.shape(), out_shape, out_shape, p);
}

Tensor max_pool1d(const Tensor& x, const Pool1dOptions& options) {
  check_3d("max_pool1d", x);
  Shape x4, y_shape, y4;
  const backend::Pool2dParams p = pool1d_params("max_pool1d", x, options, x4, y_shape, y4);
  return run_max_pool(OpKind::max_pool1d, x, x4, y_shape, y4, p);
}

Tensor avg_pool1d(const Tensor& x, const Pool1dOptions& options) {
  check_3d("avg_pool1d", x);
  Shape x4, y_shape, y4;
  const backend::Pool2dParams p = pool1d_params("avg_pool1d", x, options, x4, y_shape, y4);
  return run_avg_pool(OpKind::avg_pool1d, x, x4, y_shape, y4, p);
}

Tensor adaptive_avg_pool2d(const Tensor& x_in, Size2 output_size) {
  check_4d("adaptive_avg_pool2d", x_in);
  if (output_size.h < 1 || output_size.w < 1)
    throw ShapeError("adaptive_avg_pool2d: output_size " + size2(output_size) + " must be positive, input " +
                     ops::describe(x_in));
  // Each output window needs at least one input element to average.
  if (x_in.shape()[2] < 1 || x_in.shape()[3] < 1)
    throw ShapeError("adaptive_avg_pool2d: input " + ops::describe(x_in) + " has an empty image (H or W is 0)");
  const Shape y_shape{x_in.shape()[0], x_in.shape()[1], output_size.h, output_size.w};
  sizes::nbytes(y_shape, x_in.dtype(), "adaptive_avg_pool2d");  // pooling keeps the input's dtype
  // The kernels find window o's bounds as o * in / out and ((o + 1) * in + out - 1) / out.
  auto context = [&] { return "output_size " + size2(output_size) + " for input " + ops::describe(x_in); };
  sizes::mul(output_size.h, x_in.shape()[2] + 1, "adaptive_avg_pool2d", context);
  sizes::mul(output_size.w, x_in.shape()[3] + 1, "adaptive_avg_pool2d", context);
  Tensor x = x_in;
  amp::autocast_inputs(OpKind::adaptive_avg_pool2d, {&x});
  Tensor y = empty(y_shape, x.dtype(), x.device());
  backend::adaptive_avg_pool2d_forward(ops::dense(x), y);
  autodiff::record({&x}, y, [output_size, x_shape = x.shape(), dt = x.dtype()](const Tensor& g,
                                                                              autodiff::InputGrads& gi) {
    Tensor gx = empty(x_shape, dt, g.device());
    backend::adaptive_avg_pool2d_backward(ops::dense(g, dt), gx);
    if (gi.create_graph())
      ops::record_linear_grad(g, gx, [output_size](const Tensor& gg) { return adaptive_avg_pool2d(gg, output_size); });
    gi.set(0, gx);
  });
  return y;
}

Tensor max_pool3d(const Tensor& x, const Pool3dOptions& options) {
  return pool3d<MaxPasses>(OpKind::max_pool3d, "max_pool3d", x, options);
}

Tensor avg_pool3d(const Tensor& x, const Pool3dOptions& options) {
  return pool3d<AvgPasses>(OpKind::avg_pool3d, "avg_pool3d", x, options);
}

}  // namespace mixgrad::F
