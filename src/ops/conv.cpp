// F::conv2d, F::conv1d and F::conv_transpose2d: validation, autocast (low
// precision), the backend's kernels and a backward that runs only the kernels
// for the inputs that need a gradient. All three run the backend's three 2-d
// convolution kernels (backend/conv.hpp): conv1d on height-1 views of its
// operands, conv_transpose2d with the roles of forward and backward-data
// swapped (its forward is conv2d's backward-data, its input gradient conv2d's
// forward, its weight gradient conv2d's backward-weights with the operands
// exchanged). A recorded backward runs the same kernels as recorded nodes
// whose own backward is again these kernels (conv_part).
#include "backend/conv.hpp"

#include "backend/elementwise.hpp"
#include "backend/reduction.hpp"
#include "core/sizes.hpp"
#include "core/view.hpp"
#include "mixgrad/ops/nn.hpp"
#include "mixgrad/ops/reduction.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "hooks/kept_results.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

std::string size2(Size2 s) { return "(" + std::to_string(s.h) + ", " + std::to_string(s.w) + ")"; }

void check_conv_dtypes(const char* op, const Tensor& x, const Tensor& w, const Tensor& b) {
  if (w.dtype() != x.dtype() || (b.defined() && b.dtype() != x.dtype()))
    throw DTypeError(std::string(op) + ": dtypes differ: input " + ops::describe(x) + ", weight " +
                     ops::describe(w) + ", bias " + ops::describe(b));
}

void check_conv_inputs(const char* op, const Tensor& x, const Tensor& w, const Tensor& b) {
  ops::check_defined(op, {&x, &w});
  ops::check_same_device(op, {&x, &w, &b});
  ops::check_floating(op, x);
  ops::check_floating(op, w);
  if (b.defined()) ops::check_floating(op, b);
}

// Output extent of one spatial dim, (in + 2p - d(k - 1) - 1) / s + 1, with
// every step checked: a padding of 2^62 must not wrap to a small extent.
// Below 1 when the dilated kernel does not fit the padded input.
template <class Context>
int64_t conv_out(const char* op, int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, Context&& context) {
  const int64_t padded = sizes::add(in, sizes::mul(2, p, op, context), op, context);
  const int64_t span = sizes::mul(d, k - 1, op, context);
  if (span >= padded) return 0;
  return (padded - span - 1) / s + 1;
}

// `t` (contiguous) seen as `shape` of the same element count, without a tape
// entry: conv1d's operands as conv2d's with a height of 1.
Tensor as_shape(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  return view::make(t, shape, contiguous_strides(shape));
}

// The shapes a convolution's operands have for the user (x, w, y) and for
// the 2-d kernels (x4, w4, y4); the same for conv2d.
struct ConvShapes {
  Shape x4, w4, y, y4;
};

// ---- the recorded backward ------------------------------------------------
//
// A convolution is bilinear: y = conv(x, w), and its two gradients,
// gx = data(g, w) (conv2d's backward-data, conv_transpose2d's forward) and
// gw = weights(g, x), are bilinear too, each one's adjoints being the other
// two. In a recorded backward each runs its kernel and records a node whose
// backward is again these three, so every convolution is differentiable any
// number of times. All operate on the 4-d views of one conv2d geometry.

struct ConvGeometry {
  backend::Conv2dParams p;
  Shape x4, w4, y4;
};

enum class ConvPart : uint8_t { forward, data, weights };

// forward: conv(a = x, b = w) -> y4; data: data(a = g, b = w) -> x4;
// weights: weights(a = g, b = x) -> w4. a and b are 4-d, of one dtype.
Tensor conv_part(ConvPart part, const Tensor& a, const Tensor& b, const ConvGeometry& geo) {
  const DType dt = part == ConvPart::weights ? b.dtype() : a.dtype();
  const Tensor ac = ops::dense(a, dt), bc = ops::dense(b, dt);
  const Shape& out_shape = part == ConvPart::forward ? geo.y4 : part == ConvPart::data ? geo.x4 : geo.w4;
  Tensor out = empty(out_shape, dt, a.device());
  switch (part) {
    case ConvPart::forward: backend::conv2d_forward(ac, bc, Tensor(), out, geo.p); break;
    case ConvPart::data: backend::conv2d_backward_data(ac, bc, out, geo.p); break;
    case ConvPart::weights: backend::conv2d_backward_weights(ac, bc, out, Tensor(), geo.p); break;
  }
  autodiff::record(OpKind::conv2d, {&a, &b}, out, [part, a, b, geo](const Tensor& gg, autodiff::InputGrads& gi) {
    (void)gi.create_graph();  // runs conv_part: recorded as any op
    // <gg, part(a, b)> rewritten as <., a> and <., b> (see above).
    switch (part) {
      case ConvPart::forward:  // a = x, b = w
        if (gi.needs(0)) gi.set(0, conv_part(ConvPart::data, gg, b, geo));
        if (gi.needs(1)) gi.set(1, conv_part(ConvPart::weights, gg, a, geo));
        break;
      case ConvPart::data:  // a = g, b = w
        if (gi.needs(0)) gi.set(0, conv_part(ConvPart::forward, gg, b, geo));
        if (gi.needs(1)) gi.set(1, conv_part(ConvPart::weights, a, gg, geo));
        break;
      case ConvPart::weights:  // a = g, b = x
        if (gi.needs(0)) gi.set(0, conv_part(ConvPart::forward, b, gg, geo));
        if (gi.needs(1)) gi.set(1, conv_part(ConvPart::data, a, gg, geo));
        break;
    }
  });
  return out;
}

// `t` reshaped (recorded) to `shape`.
Tensor reshaped(const Tensor& t, const Shape& shape) { return t.shape() == shape ? t : F::reshape(t, shape); }

// A convolution's dtypes after autocast: its result's, and whether autocast
// left float32 operands beside 16-bit ones (amp::autocast_product_inputs),
// which then compute in float32 (a recorded backward too, autocast off).
struct ConvDtypes {
  DType result;
  bool mixed;
  DType compute() const { return mixed ? DType::float32 : result; }
};

ConvDtypes autocast_conv(OpKind op, const char* name, Tensor& x, Tensor& w, Tensor& b) {
  const std::optional<DType> mixed = amp::autocast_product_inputs(op, {&x, &w, &b});
  if (mixed) ops::check_mixed_operands(name, *mixed, {&x, &w, &b});
  else check_conv_dtypes(name, x, w, b);
  return {mixed.value_or(x.dtype()), mixed.has_value()};
}

// The autocast, forward and tape entry of a validated convolution, run by the
// 2-d kernels on 4-d views of the operands. The closure holds x and w
// themselves besides the dense 4-d views its kernels read, for a recorded
// backward.
Tensor run_conv(OpKind op, const char* name, const Tensor& x_in, const Tensor& w_in, const Tensor& b_in,
                const ConvShapes& s, const backend::Conv2dParams& p) {
  Tensor x = x_in, w = w_in, b = b_in;
  const ConvDtypes dt = autocast_conv(op, name, x, w, b);
  const DType dtype = dt.result;
  sizes::nbytes(s.y, dtype, name);

  const Tensor xc = as_shape(ops::dense(x), s.x4), wc = as_shape(ops::dense(w), s.w4);
  const Tensor bc = b.defined() ? ops::dense(b) : Tensor();
  const Tensor y = autodiff::keep_or_compute(op, s.y, dtype, [&] {
    Tensor out = empty(s.y, dtype, x.device());
    backend::conv2d_forward(xc, wc, bc, as_shape(out, s.y4), p);
    return out;
  });

  autodiff::record(op, {&x, &w, &b}, y, [x, w, xc, wc, p, dt, x_shape = x.shape(), w_shape = w.shape(), y4 = s.y4,
                                         b_dtype = b.defined() ? b.dtype() : dtype](const Tensor& g_in,
                                                                                    autodiff::InputGrads& gi) {
    const DType dtype = dt.result;
    if (gi.create_graph()) {
      const ConvGeometry geo{p, xc.shape(), wc.shape(), y4};
      const DType compute = dt.compute();
      std::optional<amp::detail::AutocastOff> off;
      if (dt.mixed) off.emplace();
      const Tensor g4 = reshaped(F::astype(g_in, compute), y4);
      const auto part = [&](ConvPart which, const Tensor& other, const Shape& shape, DType result) {
        return F::astype(conv_part(which, g4, reshaped(F::astype(other, compute), shape), geo), result);
      };
      if (gi.needs(0)) gi.set(0, reshaped(part(ConvPart::data, w, geo.w4, x.dtype()), x_shape));
      if (gi.needs(1)) gi.set(1, reshaped(part(ConvPart::weights, x, geo.x4, w.dtype()), w_shape));
      if (gi.needs(2)) gi.set(2, F::astype(F::sum(g4, {0, 2, 3}), b_dtype));
      return;
    }
    const Tensor g = as_shape(ops::dense(g_in, dtype), y4);
    if (gi.needs(0)) {
      Tensor gx = empty(x_shape, xc.dtype(), xc.device());
      backend::conv2d_backward_data(g, wc, as_shape(gx, xc.shape()), p);
      gi.set(0, gx);
    }
    Tensor gb = gi.needs(2) ? empty(Shape{wc.shape()[0]}, b_dtype, g.device()) : Tensor();
    if (gi.needs(1)) {
      Tensor gw = empty(w_shape, wc.dtype(), wc.device());
      backend::conv2d_backward_weights(g, xc, as_shape(gw, wc.shape()), gb, p);
      gi.set(1, gw);
    } else if (gb.defined()) {
      backend::sum_channels(g, g.shape()[0], g.shape()[1], g.shape()[2] * g.shape()[3], gb);
    }
    if (gb.defined()) gi.set(2, gb);
  });
  return y;
}

}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const Conv2dOptions& o) {
  check_conv_inputs("conv2d", x_in, w_in, b_in);
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
  const int64_t oh =
      conv_out("conv2d", x_in.shape()[2], w_in.shape()[2], o.stride.h, o.padding.h, o.dilation.h, context);
  const int64_t ow =
      conv_out("conv2d", x_in.shape()[3], w_in.shape()[3], o.stride.w, o.padding.w, o.dilation.w, context);
  if (oh < 1 || ow < 1)
    throw ShapeError("conv2d: kernel of weight " + ops::describe(w_in) + " (dilation " + size2(o.dilation) +
                     ") larger than padded input " + ops::describe(x_in) + " with padding " + size2(o.padding));
  if (!amp::detail::autocast_active()) check_conv_dtypes("conv2d", x_in, w_in, b_in);

  const Shape y_shape{x_in.shape()[0], out_ch, oh, ow};
  // The backend estimates the work as output elements times the weights per
  // output channel; that product must not wrap either.
  sizes::mul(sizes::numel(y_shape, "conv2d"), w_in.shape()[1] * w_in.shape()[2] * w_in.shape()[3], "conv2d", context);

  const backend::Conv2dParams p{
      {o.stride.h, o.stride.w}, {o.padding.h, o.padding.w}, {o.dilation.h, o.dilation.w}, o.groups};
  return run_conv(OpKind::conv2d, "conv2d", x_in, w_in, b_in, {x_in.shape(), w_in.shape(), y_shape, y_shape}, p);
}

Tensor conv1d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const Conv1dOptions& o) {
  check_conv_inputs("conv1d", x_in, w_in, b_in);
  if (x_in.ndim() != 3 || w_in.ndim() != 3)
    throw ShapeError("conv1d: expected input [N, C, L] and weight [O, C/groups, K], got " + ops::describe(x_in) +
                     " and " + ops::describe(w_in));
  const int64_t n = x_in.shape()[0], c = x_in.shape()[1], len = x_in.shape()[2];
  const int64_t out_ch = w_in.shape()[0], cg = w_in.shape()[1], k = w_in.shape()[2];
  if (o.groups < 1 || c % o.groups != 0 || out_ch % o.groups != 0 || cg != c / o.groups)
    throw ShapeError("conv1d: input " + ops::describe(x_in) + " and weight " + ops::describe(w_in) +
                     " do not fit groups=" + std::to_string(o.groups));
  if (k < 1) throw ShapeError("conv1d: weight " + ops::describe(w_in) + " has an empty kernel");
  if (b_in.defined() && (b_in.ndim() != 1 || b_in.shape()[0] != out_ch))
    throw ShapeError("conv1d: bias " + ops::describe(b_in) + " does not fit weight " + ops::describe(w_in));
  if (o.stride < 1 || o.dilation < 1 || o.padding < 0)
    throw ShapeError("conv1d: invalid stride " + std::to_string(o.stride) + ", padding " + std::to_string(o.padding) +
                     " or dilation " + std::to_string(o.dilation) + " for input " + ops::describe(x_in));
  auto context = [&] {
    return "input " + ops::describe(x_in) + ", weight " + ops::describe(w_in) + ", padding " +
           std::to_string(o.padding) + ", dilation " + std::to_string(o.dilation);
  };
  const int64_t ol = conv_out("conv1d", len, k, o.stride, o.padding, o.dilation, context);
  if (ol < 1)
    throw ShapeError("conv1d: kernel of weight " + ops::describe(w_in) + " (dilation " + std::to_string(o.dilation) +
                     ") larger than padded input " + ops::describe(x_in) + " with padding " +
                     std::to_string(o.padding));
  if (!amp::detail::autocast_active()) check_conv_dtypes("conv1d", x_in, w_in, b_in);

  const Shape y_shape{n, out_ch, ol};
  sizes::mul(sizes::numel(y_shape, "conv1d"), cg * k, "conv1d", context);
  const backend::Conv2dParams p{{1, o.stride}, {0, o.padding}, {1, o.dilation}, o.groups};
  return run_conv(OpKind::conv1d, "conv1d", x_in, w_in, b_in,
                  {{n, c, 1, len}, {out_ch, cg, 1, k}, y_shape, {n, out_ch, 1, ol}}, p);
}

Tensor conv_transpose2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in,
                        const ConvTranspose2dOptions& o) {
  constexpr const char* kOp = "conv_transpose2d";
  check_conv_inputs(kOp, x_in, w_in, b_in);
  if (x_in.ndim() != 4 || w_in.ndim() != 4)
    throw ShapeError("conv_transpose2d: expected input [N, C, H, W] and weight [C, O/groups, KH, KW], got " +
                     ops::describe(x_in) + " and " + ops::describe(w_in));
  const int64_t c = x_in.shape()[1];
  if (o.groups < 1 || c % o.groups != 0 || w_in.shape()[0] != c)
    throw ShapeError("conv_transpose2d: input " + ops::describe(x_in) + " and weight " + ops::describe(w_in) +
                     " do not fit groups=" + std::to_string(o.groups) + " (weight is [C, O/groups, KH, KW])");
  const int64_t kh = w_in.shape()[2], kw = w_in.shape()[3];
  if (kh < 1 || kw < 1) throw ShapeError("conv_transpose2d: weight " + ops::describe(w_in) + " has an empty kernel");
  const int64_t out_ch = sizes::mul(w_in.shape()[1], o.groups, kOp, [&] { return "weight " + ops::describe(w_in); });
  if (b_in.defined() && (b_in.ndim() != 1 || b_in.shape()[0] != out_ch))
    throw ShapeError("conv_transpose2d: bias " + ops::describe(b_in) + " does not fit weight " + ops::describe(w_in) +
                     " with groups=" + std::to_string(o.groups));
  if (o.stride.h < 1 || o.stride.w < 1 || o.dilation.h < 1 || o.dilation.w < 1 || o.padding.h < 0 ||
      o.padding.w < 0 || o.output_padding.h < 0 || o.output_padding.w < 0)
    throw ShapeError("conv_transpose2d: invalid stride " + size2(o.stride) + ", padding " + size2(o.padding) +
                     ", output_padding " + size2(o.output_padding) + " or dilation " + size2(o.dilation) +
                     " for input " + ops::describe(x_in));
  // output_padding picks among the output sizes that a conv2d with this
  // stride maps back to the input's size: it must stay below the stride.
  if (o.output_padding.h >= o.stride.h || o.output_padding.w >= o.stride.w)
    throw ShapeError("conv_transpose2d: output_padding " + size2(o.output_padding) + " must be smaller than stride " +
                     size2(o.stride) + " for input " + ops::describe(x_in));
  auto context = [&] {
    return "input " + ops::describe(x_in) + ", weight " + ops::describe(w_in) + ", stride " + size2(o.stride) +
           ", dilation " + size2(o.dilation);
  };
  // (in - 1) * s - 2p + d (k - 1) + output_padding + 1, each step checked.
  auto out_extent = [&](int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int64_t op) -> int64_t {
    if (in < 1) return 0;
    const int64_t grown = sizes::add(sizes::mul(in - 1, s, kOp, context),
                                     sizes::add(sizes::mul(d, k - 1, kOp, context), op + 1, kOp, context), kOp,
                                     context);
    return grown - sizes::mul(2, p, kOp, context);
  };
  const int64_t oh = out_extent(x_in.shape()[2], kh, o.stride.h, o.padding.h, o.dilation.h, o.output_padding.h);
  const int64_t ow = out_extent(x_in.shape()[3], kw, o.stride.w, o.padding.w, o.dilation.w, o.output_padding.w);
  if (oh < 1 || ow < 1)
    throw ShapeError("conv_transpose2d: input " + ops::describe(x_in) + " with weight " + ops::describe(w_in) +
                     ", stride " + size2(o.stride) + ", padding " + size2(o.padding) + " and dilation " +
                     size2(o.dilation) + " gives an empty output");
  if (!amp::detail::autocast_active()) check_conv_dtypes(kOp, x_in, w_in, b_in);

  const Shape y_shape{x_in.shape()[0], out_ch, oh, ow};
  sizes::mul(sizes::numel(x_in.shape(), kOp), w_in.shape()[1] * kh * kw, kOp, context);
  sizes::numel(y_shape, kOp);

  Tensor x = x_in, w = w_in, b = b_in;
  const ConvDtypes dt = autocast_conv(OpKind::conv_transpose2d, kOp, x, w, b);
  const DType dtype = dt.result;
  sizes::nbytes(y_shape, dtype, kOp);

  // The conv2d this op transposes maps y's shape to x's: same geometry.
  const backend::Conv2dParams p{
      {o.stride.h, o.stride.w}, {o.padding.h, o.padding.w}, {o.dilation.h, o.dilation.w}, o.groups};
  const Tensor xc = ops::dense(x), wc = ops::dense(w);
  const Tensor y = autodiff::keep_or_compute(OpKind::conv_transpose2d, y_shape, dtype, [&] {
    Tensor out = empty(y_shape, dtype, x.device());
    backend::conv2d_backward_data(xc, wc, out, p);
    if (b.defined()) {
      const Tensor bc = ops::dense(b, dtype);  // a float32 bias autocast kept is added in y's dtype, as a 16-bit one
      backend::binary(backend::BinaryOp::add, out, as_shape(bc, Shape{1, out_ch, 1, 1}), out);
    }
    return out;
  });

  autodiff::record(OpKind::conv_transpose2d, {&x, &w, &b}, y, [x, w, xc, wc, p, dt,
                                                               b_dtype = b.defined() ? b.dtype() : dtype](
                                                                  const Tensor& g_in, autodiff::InputGrads& gi) {
    const DType dtype = dt.result;
    if (gi.create_graph()) {
      // This op is conv2d's data part in the geometry mapping g's shape to x's.
      const DType compute = dt.compute();
      std::optional<amp::detail::AutocastOff> off;
      if (dt.mixed) off.emplace();
      const Tensor g = F::astype(g_in, compute);
      const ConvGeometry geo{p, g.shape(), wc.shape(), xc.shape()};
      if (gi.needs(0)) gi.set(0, F::astype(conv_part(ConvPart::forward, g, F::astype(w, compute), geo), x.dtype()));
      if (gi.needs(1)) gi.set(1, F::astype(conv_part(ConvPart::weights, F::astype(x, compute), g, geo), w.dtype()));
      if (gi.needs(2)) gi.set(2, F::astype(F::sum(g, {0, 2, 3}), b_dtype));
      return;
    }
    const Tensor g = ops::dense(g_in, dtype);
    if (gi.needs(0)) {
      Tensor gx = empty(xc.shape(), xc.dtype(), xc.device());
      backend::conv2d_forward(g, wc, Tensor(), gx, p);
      gi.set(0, gx);
    }
    if (gi.needs(1)) {
      // conv2d's weight gradient with its output gradient = x, its input = g.
      Tensor gw = empty(wc.shape(), wc.dtype(), wc.device());
      backend::conv2d_backward_weights(xc, g, gw, Tensor(), p);
      gi.set(1, gw);
    }
    if (gi.needs(2)) {
      Tensor gb = empty(Shape{g.shape()[1]}, b_dtype, g.device());
      backend::sum_channels(g, g.shape()[0], g.shape()[1], g.shape()[2] * g.shape()[3], gb);
      gi.set(2, gb);
    }
  });
  return y;
}

}  // namespace mixgrad::F
