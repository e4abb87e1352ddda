// F::max_pool2d, F::avg_pool2d, F::adaptive_avg_pool2d. Pooling keeps its
// input's dtype under autocast. Max pooling's backward closure holds the
// backend's workspace (where each maximum came from), not the input.
#include "backend/pooling.hpp"

#include "core/sizes.hpp"
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
backend::Pool2dParams pool_params(const char* op, const Tensor& x, const Pool2dOptions& o, Shape& out_shape) {
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
  const int64_t padded_h = sizes::add(x.shape()[2], 2 * padding.h, op, context);
  const int64_t padded_w = sizes::add(x.shape()[3], 2 * padding.w, op, context);
  if (padded_h < kernel.h || padded_w < kernel.w)
    throw ShapeError(std::string(op) + ": kernel_size " + size2(kernel) + " larger than padded input " +
                     ops::describe(x));
  out_shape = Shape{x.shape()[0], x.shape()[1], (padded_h - kernel.h) / stride.h + 1,
                    (padded_w - kernel.w) / stride.w + 1};
  // The kernels divide by the window area and estimate the work as output
  // elements times the area; neither may wrap.
  sizes::mul(sizes::numel(out_shape, op), sizes::mul(kernel.h, kernel.w, op, context), op, context);
  return {{kernel.h, kernel.w}, {stride.h, stride.w}, {padding.h, padding.w}};
}

}  // namespace

Tensor max_pool2d(const Tensor& x_in, const Pool2dOptions& options) {
  check_4d("max_pool2d", x_in);
  Shape out_shape;
  const backend::Pool2dParams p = pool_params("max_pool2d", x_in, options, out_shape);
  Tensor x = x_in;
  amp::autocast_inputs(OpKind::max_pool2d, {&x});
  Tensor y = empty(out_shape, x.dtype(), x.device());
  const backend::MaxPoolWorkspace ws = backend::max_pool2d_forward(ops::dense(x), y, p);
  autodiff::record({&x}, y, [ws, p, x_shape = x.shape(), dt = x.dtype()](const Tensor& g, autodiff::InputGrads& gi) {
    Tensor gx = empty(x_shape, dt, g.device());
    backend::max_pool2d_backward(ops::dense(g, dt), ws, gx, p);
    gi.set(0, gx);
  });
  return y;
}

Tensor avg_pool2d(const Tensor& x_in, const Pool2dOptions& options) {
  check_4d("avg_pool2d", x_in);
  Shape out_shape;
  const backend::Pool2dParams p = pool_params("avg_pool2d", x_in, options, out_shape);
  Tensor x = x_in;
  amp::autocast_inputs(OpKind::avg_pool2d, {&x});
  Tensor y = empty(out_shape, x.dtype(), x.device());
  backend::avg_pool2d_forward(ops::dense(x), y, p);
  autodiff::record({&x}, y, [p, options, x_shape = x.shape(), dt = x.dtype()](const Tensor& g,
                                                                             autodiff::InputGrads& gi) {
    Tensor gx = empty(x_shape, dt, g.device());
    backend::avg_pool2d_backward(ops::dense(g, dt), gx, p);
    if (gi.create_graph())
      ops::record_linear_grad(g, gx, [options](const Tensor& gg) { return avg_pool2d(gg, options); });
    gi.set(0, gx);
  });
  return y;
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

}  // namespace mixgrad::F
