// F::conv2d: validation, autocast (low precision), the backend's forward, and a
// backward that calls backward-data / backward-weights only for the inputs
// that need a gradient (the bias gradient alone is a per-channel sum).
#include "backend/conv.hpp"

#include "backend/reduction.hpp"
#include "core/sizes.hpp"
#include "mixgrad/ops/nn.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/untracked_copy.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

std::string size2(Size2 s) { return "(" + std::to_string(s.h) + ", " + std::to_string(s.w) + ")"; }

void check_conv_dtypes(const Tensor& x, const Tensor& w, const Tensor& b) {
  if (w.dtype() != x.dtype() || (b.defined() && b.dtype() != x.dtype()))
    throw DTypeError("conv2d: dtypes differ: input " + ops::describe(x) + ", weight " + ops::describe(w) +
                     ", bias " + ops::describe(b));
}

// Output extent of one spatial dim, (in + 2p - d(k - 1) - 1) / s + 1, with
// every step checked: a padding of 2^62 must not wrap to a small extent.
// Below 1 when the dilated kernel does not fit the padded input.
template <class Context>
int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, Context&& context) {
  const int64_t padded = sizes::add(in, sizes::mul(2, p, "conv2d", context), "conv2d", context);
  const int64_t span = sizes::mul(d, k - 1, "conv2d", context);
  if (span >= padded) return 0;
  return (padded - span - 1) / s + 1;
}

}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const Conv2dOptions& o) {
  ops::check_defined("conv2d", {&x_in, &w_in});
  ops::check_same_device("conv2d", {&x_in, &w_in, &b_in});
  ops::check_floating("conv2d", x_in);
  ops::check_floating("conv2d", w_in);
  if (b_in.defined()) ops::check_floating("conv2d", b_in);
  if (x_in.ndim() != 4 || w_in.ndim() != 4)
    throw ShapeError("conv2d: expected input [N, C, H, W] and weight [O, C/groups, KH, KW], got " +
                     ops::describe(x_in) + " and " + ops::describe(w_in));
  const int64_t c = x_in.shape()[1], out_ch = w_in.shape()[0];
  if (o.groups < 1 || c % o.groups != 0 || out_ch % o.groups != 0 || w_in.shape()[1] != c / o.groups)
    throw ShapeError("conv2d: input " + ops::describe(x_in) + " and weight " + ops::describe(w_in) +
                     " do not fit groups=" + std::to_string(o.groups));
  if (w_in.shape()[2] < 1 || w_in.shape()[3] < 1)
    throw ShapeError("conv2d: weight " + ops::describe(w_in) + " has an empty kernel");
  if (b_in.defined() && (b_in.ndim() != 1 || b_in.shape()[0] != out_ch))
    throw ShapeError("conv2d: bias " + ops::describe(b_in) + " does not fit weight " + ops::describe(w_in));
  if (o.stride.h < 1 || o.stride.w < 1 || o.dilation.h < 1 || o.dilation.w < 1 || o.padding.h < 0 || o.padding.w < 0)
    throw ShapeError("conv2d: invalid stride " + size2(o.stride) + ", padding " + size2(o.padding) + " or dilation " +
                     size2(o.dilation) + " for input " + ops::describe(x_in));
  auto context = [&] {
    return "input " + ops::describe(x_in) + ", weight " + ops::describe(w_in) + ", padding " + size2(o.padding) +
           ", dilation " + size2(o.dilation);
  };
  const int64_t oh = conv_out(x_in.shape()[2], w_in.shape()[2], o.stride.h, o.padding.h, o.dilation.h, context);
  const int64_t ow = conv_out(x_in.shape()[3], w_in.shape()[3], o.stride.w, o.padding.w, o.dilation.w, context);
  if (oh < 1 || ow < 1)
    throw ShapeError("conv2d: kernel of weight " + ops::describe(w_in) + " (dilation " + size2(o.dilation) +
                     ") larger than padded input " + ops::describe(x_in) + " with padding " + size2(o.padding));
  if (!amp::detail::autocast_active()) check_conv_dtypes(x_in, w_in, b_in);

  const Shape y_shape{x_in.shape()[0], out_ch, oh, ow};
  // The backend estimates the work as output elements times the weights per
  // output channel; that product must not wrap either.
  sizes::mul(sizes::numel(y_shape, "conv2d"), w_in.shape()[1] * w_in.shape()[2] * w_in.shape()[3], "conv2d", context);

  Tensor x = x_in, w = w_in, b = b_in;
  amp::autocast_inputs(OpKind::conv2d, {&x, &w, &b});
  check_conv_dtypes(x, w, b);
  sizes::nbytes(y_shape, x.dtype(), "conv2d");

  const backend::Conv2dParams p{
      {o.stride.h, o.stride.w}, {o.padding.h, o.padding.w}, {o.dilation.h, o.dilation.w}, o.groups};
  const Tensor xc = ops::dense(x), wc = ops::dense(w), bc = b.defined() ? ops::dense(b) : Tensor();
  Tensor y = empty(y_shape, x.dtype(), x.device());
  backend::conv2d_forward(xc, wc, bc, y, p);

  autodiff::record({&x, &w, &b}, y, [xc, wc, p, b_dtype = b.defined() ? b.dtype() : x.dtype()](
                                        const Tensor& g_in, autodiff::InputGrads& gi) {
    const Tensor g = ops::dense(g_in, xc.dtype());
    if (gi.needs(0)) {
      Tensor gx = empty(xc.shape(), xc.dtype(), xc.device());
      backend::conv2d_backward_data(g, wc, gx, p);
      gi.set(0, gx);
    }
    Tensor gb = gi.needs(2) ? empty(Shape{wc.shape()[0]}, b_dtype, g.device()) : Tensor();
    if (gi.needs(1)) {
      Tensor gw = empty(wc.shape(), wc.dtype(), wc.device());
      backend::conv2d_backward_weights(g, xc, gw, gb, p);
      gi.set(1, gw);
    } else if (gb.defined()) {
      backend::sum_channels(g, g.shape()[0], g.shape()[1], g.shape()[2] * g.shape()[3], gb);
    }
    if (gb.defined()) gi.set(2, gb);
  });
  return y;
}

}  // namespace mixgrad::F
