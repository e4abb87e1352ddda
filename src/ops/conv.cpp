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

// Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) at
// "(" + std::string once inlined here.
std::string size2(Size2 s) {
  std::string r = "(";
  r.append(std::to_string(s.h)).append(", ").append(std::to_string(s.w)).append(")");
  return r;
}

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
  autodiff::record(OpKind::conv2d, {&a, &b}, out, [&] {
    return [part, a, b, geo](const Tensor& gg, autodiff::InputGrads& gi) {
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
    };
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

// A convolution's recorded gradients (create_graph): conv_part on the
// tensors the forward saw, in the dtype it computed in. The kernels run the
// conv2d of geometry `geo`, whose input is `in` and whose output gradient is
// `out_grad`: for conv2d and conv1d, in = x and out_grad = g; for
// conv_transpose2d (conv2d's data part), in = g and out_grad = x.
void recorded_conv_grads(bool transposed, const Tensor& g_in, const Tensor& x, const Tensor& w, const ConvGeometry& geo,
                         const Shape& x_shape, const Shape& w_shape, DType compute, DType b_dtype,
                         autodiff::InputGrads& gi) {
  const Tensor g4 = reshaped(F::astype(g_in, compute), transposed ? geo.x4 : geo.y4);
  const Tensor x4 = reshaped(F::astype(x, compute), transposed ? geo.y4 : geo.x4);
  const Tensor w4 = reshaped(F::astype(w, compute), geo.w4);
  if (gi.needs(0)) {
    const Tensor gx = transposed ? conv_part(ConvPart::forward, g4, w4, geo) : conv_part(ConvPart::data, g4, w4, geo);
    gi.set(0, reshaped(F::astype(gx, x.dtype()), x_shape));
  }
  if (gi.needs(1)) {
    const Tensor gw = transposed ? conv_part(ConvPart::weights, x4, g4, geo) : conv_part(ConvPart::weights, g4, x4, geo);
    gi.set(1, reshaped(F::astype(gw, w.dtype()), w_shape));
  }
  if (gi.needs(2)) gi.set(2, F::astype(F::sum(g4, {0, 2, 3}), b_dtype));
}

// The same gradients with the kernels alone: g and xc, wc are the 4-d dense
// operands (g in the forward's dtype).
void conv_grads(bool transposed, const Tensor& g, const Tensor& xc, const Tensor& wc, const backend::Conv2dParams& p,
                const Shape& x_shape, const Shape& w_shape, DType b_dtype, autodiff::InputGrads& gi) {
  if (gi.needs(0)) {
    Tensor gx = empty(x_shape, xc.dtype(), xc.device(), xc.suggest_memory_format());
    if (transposed) backend::conv2d_forward(g, wc, Tensor(), as_shape(gx, xc.shape()), p);
    else backend::conv2d_backward_data(g, wc, as_shape(gx, xc.shape()), p);
    gi.set(0, gx);
  }
  Tensor gb = gi.needs(2) ? empty(Shape{g.shape()[1]}, b_dtype, g.device()) : Tensor();
  if (gi.needs(1)) {
    Tensor gw = empty(w_shape, wc.dtype(), wc.device(), wc.suggest_memory_format());
    // conv_transpose2d's is conv2d's weight gradient with its output gradient = x, its input = g.
    if (transposed) backend::conv2d_backward_weights(xc, g, as_shape(gw, wc.shape()), Tensor(), p);
    else backend::conv2d_backward_weights(g, xc, as_shape(gw, wc.shape()), gb, p);  // and the bias's
    gi.set(1, gw);
  }
  if (gb.defined() && !(gi.needs(1) && !transposed))
    backend::sum_channels(ops::dense(g), g.shape()[0], g.shape()[1], g.shape()[2] * g.shape()[3], gb);
  if (gb.defined()) gi.set(2, gb);
}

// y (4-d view `y4`) = the convolution of the dense 4-d operands, plus the bias.
void conv_forward(bool transposed, const Tensor& xc, const Tensor& wc, const Tensor& b, const Tensor& y4,
                  const backend::Conv2dParams& p) {
  if (!transposed) {
    backend::conv2d_forward(xc, wc, b.defined() ? ops::dense(b) : Tensor(), y4, p);
    return;
  }
  backend::conv2d_backward_data(xc, wc, y4, p);
  if (b.defined()) {
    const Tensor bc = ops::dense(b, y4.dtype());  // a float32 bias autocast kept is added in y's dtype, as a 16-bit one
    backend::binary(backend::BinaryOp::add, y4, as_shape(bc, Shape{1, y4.shape()[1], 1, 1}), y4);
  }
}

// The layout a convolution's activations take: channels-last when its 4-d
// input or weight is (PyTorch's rule), read and written as they lie; else
// contiguous (conv1d always: its operands are 3-d).
MemoryFormat conv_format(const Tensor& x, const Tensor& w) {
  if (x.ndim() != 4) return MemoryFormat::contiguous;
  const bool cl = x.suggest_memory_format() == MemoryFormat::channels_last ||
                  w.suggest_memory_format() == MemoryFormat::channels_last;
  return cl ? MemoryFormat::channels_last : MemoryFormat::contiguous;
}

// The autocast, forward and tape entry of a validated convolution, run by the
// 2-d kernels on 4-d views of the operands; `transposed`: conv_transpose2d,
// conv2d's data part. The closure, built only when something records, holds
// x and w themselves besides the dense 4-d views its kernels read, for a
// recorded backward.
Tensor run_conv(OpKind op, const char* name, const Tensor& x_in, const Tensor& w_in, const Tensor& b_in,
                const ConvShapes& s, const backend::Conv2dParams& p, bool transposed = false) {
  Tensor x = x_in, w = w_in, b = b_in;
  const ConvDtypes dt = autocast_conv(op, name, x, w, b);
  const DType dtype = dt.result;
  sizes::nbytes(s.y, dtype, name);

  const MemoryFormat format = conv_format(x, w);
  const Tensor xc = as_shape(ops::dense(x, x.dtype(), format), s.x4);
  const Tensor wc = as_shape(ops::dense(w, w.dtype(), w.suggest_memory_format()), s.w4);
  const Tensor y = autodiff::keep_or_compute(op, s.y, dtype, [&] {
    Tensor out = empty(s.y, dtype, x.device(), format);
    conv_forward(transposed, xc, wc, b, as_shape(out, s.y4), p);
    return out;
  });
  autodiff::record(op, {&x, &w, &b}, y, [&] {
    // The conv2d these kernels run: transposed, its input is y and its output x.
    const ConvGeometry geo{p, transposed ? s.y4 : s.x4, s.w4, transposed ? s.x4 : s.y4};
    return [x, w, xc, wc, geo, dt, transposed, format, y4 = s.y4, b_dtype = b.defined() ? b.dtype() : dtype](
               const Tensor& g_in, autodiff::InputGrads& gi) {
      if (gi.create_graph()) {
        std::optional<amp::detail::AutocastOff> off;
        if (dt.mixed) off.emplace();
        recorded_conv_grads(transposed, g_in, x, w, geo, x.shape(), w.shape(), dt.compute(), b_dtype, gi);
        return;
      }
      const Tensor g = as_shape(ops::dense(g_in, dt.result, format), y4);
      conv_grads(transposed, g, xc, wc, geo.p, x.shape(), w.shape(), b_dtype, gi);
    };
  });
  return y;
}

// A convolution's spatial arguments, one entry per spatial dim (conv1d: 1,
// conv2d: 2), and how its errors name its layout.
struct ConvSpec {
  const char* op;
  const char* layout;  // "input [N, C, H, W] and weight [O, C/groups, KH, KW]"
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups;
};

// An extent as the op's options spell it: "2" for conv1d, "(2, 3)" for conv2d.
std::string extent(const std::vector<int64_t>& v) {
  if (v.size() == 1) return std::to_string(v[0]);
  std::string out = "(";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + ")";
}

// Checks a convolution's operands (x [N, C, *spatial], weight [O, C/groups,
// *kernel], bias [O]) and arguments; returns its output shape.
Shape conv_output_shape(const ConvSpec& c, const Tensor& x, const Tensor& w, const Tensor& b) {
  const std::string op = c.op;
  const int dims = static_cast<int>(c.stride.size());
  check_conv_inputs(c.op, x, w, b);
  if (x.ndim() != 2 + dims || w.ndim() != 2 + dims)
    throw ShapeError(op + ": expected " + c.layout + ", got " + ops::describe(x) + " and " + ops::describe(w));
  const int64_t ch = x.shape()[1], out_ch = w.shape()[0];
  if (c.groups < 1 || ch % c.groups != 0 || out_ch % c.groups != 0 || w.shape()[1] != ch / c.groups)
    throw ShapeError(op + ": input " + ops::describe(x) + " and weight " + ops::describe(w) +
                     " do not fit groups=" + std::to_string(c.groups));
  for (int d = 0; d < dims; ++d)
    if (w.shape()[2 + d] < 1) throw ShapeError(op + ": weight " + ops::describe(w) + " has an empty kernel");
  if (b.defined() && (b.ndim() != 1 || b.shape()[0] != out_ch))
    throw ShapeError(op + ": bias " + ops::describe(b) + " does not fit weight " + ops::describe(w));
  for (int d = 0; d < dims; ++d)
    if (c.stride[d] < 1 || c.dilation[d] < 1 || c.padding[d] < 0)
      throw ShapeError(op + ": invalid stride " + extent(c.stride) + ", padding " + extent(c.padding) +
                       " or dilation " + extent(c.dilation) + " for input " + ops::describe(x));
  auto context = [&] {
    return "input " + ops::describe(x) + ", weight " + ops::describe(w) + ", padding " + extent(c.padding) +
           ", dilation " + extent(c.dilation);
  };
  Shape y{x.shape()[0], out_ch};
  for (int d = 0; d < dims; ++d) {
    const int64_t o = conv_out(c.op, x.shape()[2 + d], w.shape()[2 + d], c.stride[d], c.padding[d], c.dilation[d],
                               context);
    if (o < 1)
      throw ShapeError(op + ": kernel of weight " + ops::describe(w) + " (dilation " + extent(c.dilation) +
                       ") larger than padded input " + ops::describe(x) + " with padding " + extent(c.padding));
    y.push_back(o);
  }
  if (!amp::detail::autocast_active()) check_conv_dtypes(c.op, x, w, b);
  // The backend estimates the work as output elements times the weights per
  // output channel; that product must not wrap either.
  int64_t per_channel = 1;  // the weights per output channel: C/groups times the kernel
  for (int d = 1; d < w.ndim(); ++d) per_channel *= w.shape()[d];
  sizes::mul(sizes::numel(y, c.op), per_channel, c.op, context);
  return y;
}

// Checks conv_transpose2d's operands and arguments; returns its output shape.
Shape conv_transpose_output_shape(const Tensor& x, const Tensor& w, const Tensor& b, const ConvTranspose2dOptions& o) {
  constexpr const char* kOp = "conv_transpose2d";
  const std::string op = kOp;
  check_conv_inputs(kOp, x, w, b);
  if (x.ndim() != 4 || w.ndim() != 4)
    throw ShapeError(op + ": expected input [N, C, H, W] and weight [C, O/groups, KH, KW], got " + ops::describe(x) +
                     " and " + ops::describe(w));
  if (o.groups < 1 || x.shape()[1] % o.groups != 0 || w.shape()[0] != x.shape()[1])
    throw ShapeError(op + ": input " + ops::describe(x) + " and weight " + ops::describe(w) + " do not fit groups=" +
                     std::to_string(o.groups) + " (weight is [C, O/groups, KH, KW])");
  const int64_t kh = w.shape()[2], kw = w.shape()[3];
  if (kh < 1 || kw < 1) throw ShapeError(op + ": weight " + ops::describe(w) + " has an empty kernel");
  const int64_t out_ch = sizes::mul(w.shape()[1], o.groups, kOp, [&] { return "weight " + ops::describe(w); });
  if (b.defined() && (b.ndim() != 1 || b.shape()[0] != out_ch))
    throw ShapeError(op + ": bias " + ops::describe(b) + " does not fit weight " + ops::describe(w) +
                     " with groups=" + std::to_string(o.groups));
  if (o.stride.h < 1 || o.stride.w < 1 || o.dilation.h < 1 || o.dilation.w < 1 || o.padding.h < 0 ||
      o.padding.w < 0 || o.output_padding.h < 0 || o.output_padding.w < 0)
    throw ShapeError(op + ": invalid stride " + size2(o.stride) + ", padding " + size2(o.padding) +
                     ", output_padding " + size2(o.output_padding) + " or dilation " + size2(o.dilation) +
                     " for input " + ops::describe(x));
  // output_padding picks among the output sizes that a conv2d with this
  // stride maps back to the input's size: it must stay below the stride.
  if (o.output_padding.h >= o.stride.h || o.output_padding.w >= o.stride.w)
    throw ShapeError(op + ": output_padding " + size2(o.output_padding) + " must be smaller than stride " +
                     size2(o.stride) + " for input " + ops::describe(x));
  auto context = [&] {
    return "input " + ops::describe(x) + ", weight " + ops::describe(w) + ", stride " + size2(o.stride) +
           ", dilation " + size2(o.dilation);
  };
  // (in - 1) * s - 2p + d (k - 1) + output_padding + 1, each step checked.
  auto out_extent = [&](int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, int64_t op_) -> int64_t {
    if (in < 1) return 0;
    const int64_t grown = sizes::add(sizes::mul(in - 1, s, kOp, context),
                                     sizes::add(sizes::mul(d, k - 1, kOp, context), op_ + 1, kOp, context), kOp,
                                     context);
    return grown - sizes::mul(2, p, kOp, context);
  };
  const int64_t oh = out_extent(x.shape()[2], kh, o.stride.h, o.padding.h, o.dilation.h, o.output_padding.h);
  const int64_t ow = out_extent(x.shape()[3], kw, o.stride.w, o.padding.w, o.dilation.w, o.output_padding.w);
  if (oh < 1 || ow < 1)
    throw ShapeError(op + ": input " + ops::describe(x) + " with weight " + ops::describe(w) + ", stride " +
                     size2(o.stride) + ", padding " + size2(o.padding) + " and dilation " + size2(o.dilation) +
                     " gives an empty output");
  if (!amp::detail::autocast_active()) check_conv_dtypes(kOp, x, w, b);
  const Shape y{x.shape()[0], out_ch, oh, ow};
  sizes::mul(sizes::numel(x.shape(), kOp), w.shape()[1] * kh * kw, kOp, context);
  sizes::numel(y, kOp);
  return y;
}

}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const Conv2dOptions& o) {
  const Shape y = conv_output_shape({"conv2d", "input [N, C, H, W] and weight [O, C/groups, KH, KW]",
                                     {o.stride.h, o.stride.w}, {o.padding.h, o.padding.w},
                                     {o.dilation.h, o.dilation.w}, o.groups},
                                    x_in, w_in, b_in);
  const backend::Conv2dParams p{
      {o.stride.h, o.stride.w}, {o.padding.h, o.padding.w}, {o.dilation.h, o.dilation.w}, o.groups};
  return run_conv(OpKind::conv2d, "conv2d", x_in, w_in, b_in, {x_in.shape(), w_in.shape(), y, y}, p);
}

Tensor conv1d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const Conv1dOptions& o) {
  const Shape y = conv_output_shape(
      {"conv1d", "input [N, C, L] and weight [O, C/groups, K]", {o.stride}, {o.padding}, {o.dilation}, o.groups}, x_in,
      w_in, b_in);
  const int64_t n = x_in.shape()[0], c = x_in.shape()[1], len = x_in.shape()[2];
  const int64_t out_ch = w_in.shape()[0], cg = w_in.shape()[1], k = w_in.shape()[2];
  const backend::Conv2dParams p{{1, o.stride}, {0, o.padding}, {1, o.dilation}, o.groups};
  return run_conv(OpKind::conv1d, "conv1d", x_in, w_in, b_in, {{n, c, 1, len}, {out_ch, cg, 1, k}, y, {n, out_ch, 1, y[2]}},
                  p);
}

Tensor conv_transpose2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in,
                        const ConvTranspose2dOptions& o) {
  const Shape y = conv_transpose_output_shape(x_in, w_in, b_in, o);
  // The conv2d this op transposes maps y's shape to x's: same geometry.
  const backend::Conv2dParams p{
      {o.stride.h, o.stride.w}, {o.padding.h, o.padding.w}, {o.dilation.h, o.dilation.w}, o.groups};
  return run_conv(OpKind::conv_transpose2d, "conv_transpose2d", x_in, w_in, b_in, {x_in.shape(), w_in.shape(), y, y},
                  p, true);
}

}  // namespace mixgrad::F
