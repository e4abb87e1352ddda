// F::max_pool2d, F::avg_pool2d, F::adaptive_avg_pool2d, and F::max_pool1d /
// F::avg_pool1d, which run the 2-d kernels on height-1 views of their
// [N, C, L] input, and F::max_pool3d / F::avg_pool3d, which run them twice:
// over (H, W) per depth slice, then along D (a box window is separable for
// both the max and the padding-excluded mean). Pooling keeps its input's dtype under autocast. Max
// pooling's backward closure holds the backend's workspace (where each
// maximum came from) for the ordinary backward, and the input, from which a
// recorded backward finds the maxima again in a form it can gather by.
// The 2-d ops keep a channels-last input's layout all the way: the kernels
// read it as it lies and write a channels-last result, the gradients (and a
// recorded backward's argmax map, scatter and gather) are channels-last too;
// no NCHW copy is made (docs/memory_format.md).
#include <array>
#include <memory>

#include "backend/pooling.hpp"

#include "core/sizes.hpp"
#include "core/view.hpp"
#include "mixgrad/ops/nn.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

// Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) at
// "(" + std::string once inlined here.
std::string size2(Size2 s) {
  std::string r = "(";
  r.append(std::to_string(s.h)).append(", ").append(std::to_string(s.w)).append(")");
  return r;
}

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

// `t` (contiguous) seen as `shape` of the same element count, no tape entry;
// t itself when it has that shape (a 2-d op's operands, in either layout).
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
  MemoryFormat format;  // of x, y and their gradients
};
using ArgmaxPtr = std::shared_ptr<const ArgmaxMap>;

// In a recorded backward, max pooling's input gradient is linear in g (g
// routed to the argmax positions, which are piecewise constant in x): the
// scatter is recorded as a node on g whose backward gathers at the same
// positions, and the gather records the scatter, so max pooling is
// differentiable any number of times.
Tensor gather_from_argmax(OpKind op, const Tensor& gg, const ArgmaxPtr& m);

Tensor scatter_to_argmax(OpKind op, const Tensor& g, const ArgmaxPtr& m) {
  Tensor gx = empty(m->x_shape, m->dt, g.device(), m->format);
  backend::max_pool2d_backward(as_shape(ops::dense(g, m->dt, m->format), m->y4), m->ws, as_shape(gx, m->x4), m->p);
  ops::record_linear_grad(op, g, gx, [op, m](const Tensor& gg) { return gather_from_argmax(op, gg, m); });
  return gx;
}

Tensor gather_from_argmax(OpKind op, const Tensor& gg, const ArgmaxPtr& m) {
  Tensor gy = empty(m->y_shape, m->dt, gg.device(), m->format);
  backend::max_pool2d_gather(as_shape(ops::dense(gg, m->dt, m->format), m->x4), m->ws, as_shape(gy, m->y4));
  ops::record_linear_grad(op, gg, gy, [op, m](const Tensor& g) { return scatter_to_argmax(op, g, m); });
  return gy;
}

// One 2-d pass of a pooling: the kernels see its input as x4 and its output
// (shape y) as y4. The 1-d and 2-d poolings are one pass, the 3-d ones two.
struct PoolPass {
  Shape x4, y, y4;
  backend::Pool2dParams p;
};

// A 2-d pooling's passes run in its input's layout (`format`, contiguous or
// channels-last); the 1-d and 3-d ones on contiguous views.
struct PoolPlan {
  std::array<PoolPass, 2> pass;
  int passes = 1;
  MemoryFormat format = MemoryFormat::contiguous;
};

// The argmax map of pass ps on x (laid out as `format`) into a fresh tensor
// of its output shape, which is returned through `y` (a 3-d pooling's second
// pass reads it).
ArgmaxPtr argmax_map(const Tensor& x, const Shape& x_shape, const PoolPass& ps, MemoryFormat format,
                     Tensor* y = nullptr) {
  Tensor out = empty(ps.y, x.dtype(), x.device(), format);
  auto m = std::make_shared<ArgmaxMap>(ArgmaxMap{
      backend::max_pool2d_argmax(as_shape(ops::dense(x, x.dtype(), format), ps.x4), as_shape(out, ps.y4), ps.p), ps.p,
      x_shape, ps.x4, ps.y, ps.y4, x.dtype(), format});
  if (y) *y = out;
  return m;
}

PoolPlan one_pass(const Shape& x4, const Shape& y, const Shape& y4, const backend::Pool2dParams& p,
                  MemoryFormat format = MemoryFormat::contiguous) {
  return {{PoolPass{x4, y, y4, p}, PoolPass{}}, 1, format};
}

// Max pooling: each pass keeps its workspace (where each maximum came from)
// for the ordinary backward, and the closure holds the input, from which a
// recorded backward finds the maxima again on the built-in path (the oneDNN
// workspace cannot be read by position).
struct MaxPool {
  using Workspace = backend::MaxPoolWorkspace;
  struct Saved {
    Tensor x;
    std::array<Workspace, 2> ws;
    const Shape& x_shape() const { return x.shape(); }
    DType dtype() const { return x.dtype(); }
  };

  static Saved keep(const Tensor& x) { return {x, {}}; }
  static Workspace forward(const Tensor& in, const Tensor& out, const backend::Pool2dParams& p) {
    return backend::max_pool2d_forward(in, out, p);
  }
  static void backward(const Tensor& gy, const Workspace& ws, const Tensor& gx, const backend::Pool2dParams& p) {
    backend::max_pool2d_backward(gy, ws, gx, p);
  }
  static Tensor recorded_grad(const Saved& s, const Tensor& g, OpKind op, const PoolPlan& plan);
};

// Average pooling keeps only the input's shape and dtype: its gradient is
// linear, and a recorded backward records the pooling itself as its adjoint.
struct AvgPool {
  struct Workspace {};
  struct Saved {
    Shape shape;
    DType dt;
    std::array<Workspace, 2> ws;
    const Shape& x_shape() const { return shape; }
    DType dtype() const { return dt; }
  };

  static Saved keep(const Tensor& x) { return {x.shape(), x.dtype(), {}}; }
  static Workspace forward(const Tensor& in, const Tensor& out, const backend::Pool2dParams& p) {
    backend::avg_pool2d_forward(in, out, p);
    return {};
  }
  static void backward(const Tensor& gy, const Workspace&, const Tensor& gx, const backend::Pool2dParams& p) {
    backend::avg_pool2d_backward(gy, gx, p);
  }
  static Tensor recorded_grad(const Saved& s, const Tensor& g, OpKind op, const PoolPlan& plan);
};

// The shape of pass i's input: x's own for the first pass.
template <class Saved>
const Shape& pass_input(const Saved& s, const PoolPlan& plan, int i) {
  return i == 0 ? s.x_shape() : plan.pass[static_cast<size_t>(i - 1)].y;
}

// The input gradient: the passes' backwards, last pass first.
template <class Kind>
Tensor pool_backward(const typename Kind::Saved& s, const Tensor& g, const PoolPlan& plan) {
  const DType dt = s.dtype();
  Tensor gy = ops::dense(g, dt, plan.format);
  for (int i = plan.passes - 1; i >= 0; --i) {
    const PoolPass& ps = plan.pass[static_cast<size_t>(i)];
    Tensor gx = empty(pass_input(s, plan, i), dt, g.device(), plan.format);
    Kind::backward(as_shape(gy, ps.y4), s.ws[static_cast<size_t>(i)], as_shape(gx, ps.x4), ps.p);
    gy = gx;
  }
  return gy;
}

// Autocast, the passes and the tape entry of a validated pooling.
template <class Kind>
Tensor run_pool(OpKind op, const Tensor& x_in, const PoolPlan& plan) {
  Tensor x = x_in;
  amp::autocast_inputs(op, {&x});
  typename Kind::Saved s = Kind::keep(x);
  Tensor in = ops::dense(x, x.dtype(), plan.format), out;
  for (int i = 0; i < plan.passes; ++i) {
    const PoolPass& ps = plan.pass[static_cast<size_t>(i)];
    out = empty(ps.y, x.dtype(), x.device(), plan.format);
    s.ws[static_cast<size_t>(i)] = Kind::forward(as_shape(in, ps.x4), as_shape(out, ps.y4), ps.p);
    in = out;
  }
  autodiff::record(op, {&x}, out, [&] {
    return [s, op, plan](const Tensor& g, autodiff::InputGrads& gi) {
      gi.set(0, gi.create_graph() ? Kind::recorded_grad(s, g, op, plan) : pool_backward<Kind>(s, g, plan));
    };
  });
  return out;
}

Tensor MaxPool::recorded_grad(const Saved& s, const Tensor& g, OpKind op, const PoolPlan& plan) {
  std::array<ArgmaxPtr, 2> maps;
  Tensor in = s.x;
  for (int i = 0; i < plan.passes; ++i) {
    const PoolPass& ps = plan.pass[static_cast<size_t>(i)];
    Tensor next;
    maps[static_cast<size_t>(i)] = argmax_map(in, pass_input(s, plan, i), ps, plan.format, &next);
    in = next;
  }
  Tensor gx = g;
  for (int i = plan.passes - 1; i >= 0; --i) gx = scatter_to_argmax(op, gx, maps[static_cast<size_t>(i)]);
  return gx;
}

Tensor AvgPool::recorded_grad(const Saved& s, const Tensor& g, OpKind op, const PoolPlan& plan) {
  Tensor gx = pool_backward<AvgPool>(s, g, plan);
  ops::record_linear_grad(op, g, gx, [op, plan](const Tensor& gg) { return run_pool<AvgPool>(op, gg, plan); });
  return gx;
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
  std::string r = "(";  // appended, as size2
  r.append(std::to_string(s.d)).append(", ").append(std::to_string(s.h)).append(", ");
  r.append(std::to_string(s.w)).append(")");
  return r;
}

// The two 2-d passes of a 3-d pooling: (H, W) windows on [N*C, D, H, W],
// then D windows on the result seen as [N*C, 1, D, OH*OW].
PoolPlan pool3d_plan(const char* op, const Tensor& x, const Pool3dOptions& o) {
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
  const Shape x4{planes, s[2], s[3], s[4]};
  Shape mid, y4;
  const backend::Pool2dParams hw =
      pool_params(op, x, x4, {.kernel_size = {k.h, k.w}, .stride = {st.h, st.w}, .padding = {pad.h, pad.w}}, mid);
  const Shape mid4{planes, 1, s[2], mid[2] * mid[3]};
  const backend::Pool2dParams depth =
      pool_params(op, x, mid4, {.kernel_size = {k.d, 1}, .stride = {st.d, 1}, .padding = {pad.d, 0}}, y4);
  const Shape y{s[0], s[1], y4[2], mid[2], mid[3]};
  sizes::nbytes(mid, x.dtype(), op);  // pooling keeps the input's dtype
  sizes::nbytes(y, x.dtype(), op);
  return {{PoolPass{x4, mid, mid, hw}, PoolPass{mid4, y, y4, depth}}, 2, MemoryFormat::contiguous};
}

}  // namespace


Tensor max_pool2d(const Tensor& x, const Pool2dOptions& options) {
  check_4d("max_pool2d", x);
  Shape out_shape;
  const backend::Pool2dParams p = pool_params("max_pool2d", x, x.shape(), options, out_shape);
  return run_pool<MaxPool>(OpKind::max_pool2d, x,
                           one_pass(x.shape(), out_shape, out_shape, p, x.suggest_memory_format()));
}

Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& options) {
  check_4d("avg_pool2d", x);
  Shape out_shape;
  const backend::Pool2dParams p = pool_params("avg_pool2d", x, x.shape(), options, out_shape);
  return run_pool<AvgPool>(OpKind::avg_pool2d, x,
                           one_pass(x.shape(), out_shape, out_shape, p, x.suggest_memory_format()));
}

Tensor max_pool1d(const Tensor& x, const Pool1dOptions& options) {
  check_3d("max_pool1d", x);
  Shape x4, y_shape, y4;
  const backend::Pool2dParams p = pool1d_params("max_pool1d", x, options, x4, y_shape, y4);
  return run_pool<MaxPool>(OpKind::max_pool1d, x, one_pass(x4, y_shape, y4, p));
}

Tensor avg_pool1d(const Tensor& x, const Pool1dOptions& options) {
  check_3d("avg_pool1d", x);
  Shape x4, y_shape, y4;
  const backend::Pool2dParams p = pool1d_params("avg_pool1d", x, options, x4, y_shape, y4);
  return run_pool<AvgPool>(OpKind::avg_pool1d, x, one_pass(x4, y_shape, y4, p));
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
  const MemoryFormat format = x_in.suggest_memory_format();  // the kernels read and write it as it lies
  Tensor y = empty(y_shape, x.dtype(), x.device(), format);
  backend::adaptive_avg_pool2d_forward(ops::dense(x, x.dtype(), format), y);
  autodiff::record(OpKind::adaptive_avg_pool2d, {&x}, y, [&] {
    return [output_size, x_shape = x.shape(), dt = x.dtype(), format](const Tensor& g, autodiff::InputGrads& gi) {
      Tensor gx = empty(x_shape, dt, g.device(), format);
      backend::adaptive_avg_pool2d_backward(ops::dense(g, dt, format), gx);
      if (gi.create_graph())
        ops::record_linear_grad(OpKind::adaptive_avg_pool2d, g, gx,
                                [output_size](const Tensor& gg) { return adaptive_avg_pool2d(gg, output_size); });
      gi.set(0, gx);
    };
  });
  return y;
}

Tensor max_pool3d(const Tensor& x, const Pool3dOptions& options) {
  return run_pool<MaxPool>(OpKind::max_pool3d, x, pool3d_plan("max_pool3d", x, options));
}

Tensor avg_pool3d(const Tensor& x, const Pool3dOptions& options) {
  return run_pool<AvgPool>(OpKind::avg_pool3d, x, pool3d_plan("avg_pool3d", x, options));
}

}  // namespace mixgrad::F
