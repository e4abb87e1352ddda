// F::pad, F::interpolate. Validation builds the backend's parameters and the
// output shape before anything is allocated or cast, so a throwing call
// changes nothing. Both ops are linear in x: their backward closures keep
// only the parameters and x's shape, not x. Circular padding and bicubic
// interpolation are composed of other F:: ops (narrow and concat; F::
// upsample_bicubic2d), which record themselves.
#include <cmath>
#include <string>

#include "backend/resize.hpp"
#include "core/sizes.hpp"
#include "mixgrad/ops/resize.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "mixgrad/ops/upsample_bicubic.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

// pad is linear in x (y = P x, up to constant mode's value) and its gradient
// kernel is P's adjoint. For a recorded backward each is recorded as a node
// whose backward is the other, so pad is differentiable any number of times.
Tensor pad_adjoint_recorded(const Tensor& g, const backend::PadParams& p, const Shape& x_shape);

/// P g with zeros for constant mode's value, recorded on g.
Tensor pad_recorded(const Tensor& gg, backend::PadParams p, const Shape& y_shape) {
  p.value = 0.0;
  Tensor out = empty(y_shape, gg.dtype(), gg.device());
  backend::pad_forward(ops::dense(gg), out, p);
  autodiff::record(OpKind::pad, {&gg}, out, [&] {
    return [p, x_shape = gg.shape()](const Tensor& g, autodiff::InputGrads& gi) {
      (void)gi.create_graph();  // recorded in a recorded backward, plain otherwise (no recording then)
      gi.set(0, pad_adjoint_recorded(g, p, x_shape));
    };
  });
  return out;
}

/// P^T g (the pad gradient kernel), recorded on g.
Tensor pad_adjoint_recorded(const Tensor& g, const backend::PadParams& p, const Shape& x_shape) {
  Tensor gx = empty(x_shape, g.dtype(), g.device());
  backend::pad_backward(ops::dense(g), gx, p);
  autodiff::record(OpKind::pad, {&g}, gx, [&] {
    return [p, y_shape = g.shape()](const Tensor& gg, autodiff::InputGrads& gi) {
      (void)gi.create_graph();
      gi.set(0, pad_recorded(gg, p, y_shape));
    };
  });
  return gx;
}

std::string list(const std::vector<int64_t>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "}";
}

const char* mode_name(PadMode m) {
  switch (m) {
    case PadMode::constant: return "constant";
    case PadMode::reflect: return "reflect";
    case PadMode::replicate: return "replicate";
    case PadMode::circular: return "circular";
  }
  return "?";
}

// Validated parameters and output shape of F::pad.
backend::PadParams pad_params(const Tensor& x, const std::vector<int64_t>& pads, PadMode mode, double value,
                              Shape& out_shape) {
  auto context = [&] { return "pads " + list(pads) + " (" + mode_name(mode) + ") on input " + ops::describe(x); };
  if (mode != PadMode::constant && mode != PadMode::reflect && mode != PadMode::replicate &&
      mode != PadMode::circular)
    throw ValueError("pad: unknown mode " + std::to_string(static_cast<int>(mode)) + " for input " +
                     ops::describe(x));
  const auto ndim = static_cast<int64_t>(x.ndim());
  if (pads.empty() || pads.size() % 2 != 0 || static_cast<int64_t>(pads.size()) > 2 * ndim)
    throw ShapeError("pad: " + context() + ": expected (before, after) pairs for 1 to x.ndim() trailing dims");
  backend::PadParams p;
  // circular never reaches the backend (pad_circular); it reads as replicate here.
  p.mode = mode == PadMode::constant  ? backend::PadKind::constant
           : mode == PadMode::reflect ? backend::PadKind::reflect
                                      : backend::PadKind::replicate;
  p.value = value;
  p.dims = static_cast<int>(pads.size() / 2);
  out_shape = x.shape();
  for (int k = 0; k < p.dims; ++k) {
    // pads[2k], pads[2k + 1] belong to dim ndim - 1 - k.
    const int64_t before = pads[2 * static_cast<size_t>(k)], after = pads[2 * static_cast<size_t>(k) + 1];
    const int dim = static_cast<int>(ndim) - 1 - k;
    const int64_t in = x.shape()[dim];
    if (before < 0 || after < 0)
      throw ShapeError("pad: " + context() + ": negative padding (cropping) is not supported; use narrow");
    if (mode == PadMode::reflect && (before >= in || after >= in))
      throw ShapeError("pad: " + context() + ": reflect padding must be smaller than the padded dim " +
                       std::to_string(dim) + " (size " + std::to_string(in) + ")");
    if (mode == PadMode::replicate && in == 0)
      throw ShapeError("pad: " + context() + ": replicate padding needs a non-empty dim " + std::to_string(dim));
    if (mode == PadMode::circular && (before > in || after > in))
      throw ShapeError("pad: " + context() + ": circular padding must be at most the padded dim " +
                       std::to_string(dim) + " (size " + std::to_string(in) + "); it would wrap around more than once");
    out_shape[dim] = sizes::add(sizes::add(in, before, "pad", context), after, "pad", context);
    p.before[static_cast<size_t>(p.dims - 1 - k)] = before;  // the backend counts from the first padded dim
  }
  sizes::nbytes(out_shape, x.dtype(), "pad");
  return p;
}

// Circular padding of validated `pads`: per padded dim, the last `before`
// elements, x, then the first `after` ones. Linear in x as narrow and concat
// are, so differentiable any number of times.
Tensor pad_circular(Tensor x, const std::vector<int64_t>& pads) {
  const amp::detail::AutocastOff composed;
  for (size_t k = 0; 2 * k < pads.size(); ++k) {
    const int dim = x.ndim() - 1 - static_cast<int>(k);
    const int64_t before = pads[2 * k], after = pads[2 * k + 1], in = x.size(dim);
    if (before == 0 && after == 0) continue;
    std::vector<Tensor> parts;
    if (before > 0) parts.push_back(narrow(x, dim, in - before, before));
    parts.push_back(x);
    if (after > 0) parts.push_back(narrow(x, dim, 0, after));
    x = concat(parts, dim);
  }
  return x;
}

// Validated parameters and output extent of F::interpolate.
backend::UpsampleParams upsample_params(const Tensor& x, const InterpolateOptions& o, Shape& out_shape) {
  const bool bilinear = o.mode == InterpolateMode::bilinear;
  if (!bilinear && o.mode != InterpolateMode::nearest && o.mode != InterpolateMode::bicubic)
    throw ValueError("interpolate: unknown mode " + std::to_string(static_cast<int>(o.mode)) + " for input " +
                     ops::describe(x));
  if (o.align_corners && o.mode == InterpolateMode::nearest)
    throw ValueError("interpolate: align_corners applies to bilinear and bicubic only, not nearest (input " +
                     ops::describe(x) + ")");
  const bool has_size = o.size.h != 0 || o.size.w != 0;
  const bool has_scale = o.scale_factor.h != 0.0 || o.scale_factor.w != 0.0;
  const std::string given = "size (" + std::to_string(o.size.h) + ", " + std::to_string(o.size.w) +
                            "), scale_factor (" + std::to_string(o.scale_factor.h) + ", " +
                            std::to_string(o.scale_factor.w) + ") for input " + ops::describe(x);
  if (has_size == has_scale) throw ValueError("interpolate: give exactly one of size and scale_factor; got " + given);
  const int64_t h = x.shape()[2], w = x.shape()[3];
  if (h < 1 || w < 1) throw ShapeError("interpolate: input " + ops::describe(x) + " has an empty image (H or W is 0)");
  backend::UpsampleParams p;
  p.bilinear = bilinear;
  p.align_corners = o.align_corners;
  int64_t oh = o.size.h, ow = o.size.w;
  if (has_scale) {
    auto extent = [&](int64_t in, double s) -> int64_t {
      // Both bounds hold for NaN's negation; 2^40 keeps every later product in range.
      if (!(s > 0.0) || !(static_cast<double>(in) * s < 1099511627776.0))
        throw ValueError("interpolate: scale_factor must be positive and finite with a representable output; got " +
                         given);
      return static_cast<int64_t>(std::floor(static_cast<double>(in) * s));
    };
    oh = extent(h, o.scale_factor.h);
    ow = extent(w, o.scale_factor.w);
    p.scale_h = o.scale_factor.h;
    p.scale_w = o.scale_factor.w;
  }
  if (oh < 1 || ow < 1) throw ShapeError("interpolate: output size must be positive; got " + given);
  out_shape = Shape{x.shape()[0], x.shape()[1], oh, ow};
  sizes::nbytes(out_shape, x.dtype(), "interpolate");
  return p;
}

}  // namespace

Tensor pad(const Tensor& x_in, const std::vector<int64_t>& pads, PadMode mode, double value) {
  ops::check_defined("pad", {&x_in});
  ops::check_floating("pad", x_in);
  Shape out_shape;
  const backend::PadParams p = pad_params(x_in, pads, mode, value, out_shape);
  Tensor x = x_in;
  amp::autocast_inputs(OpKind::pad, {&x});
  if (mode == PadMode::circular) return pad_circular(x, pads);
  Tensor y = empty(out_shape, x.dtype(), x.device());
  backend::pad_forward(ops::dense(x), y, p);
  autodiff::record(OpKind::pad, {&x}, y, [&] {
    return [p, x_shape = x.shape(), dt = x.dtype()](const Tensor& g, autodiff::InputGrads& gi) {
      if (gi.create_graph()) return gi.set(0, pad_adjoint_recorded(g, p, x_shape));
      Tensor gx = empty(x_shape, dt, g.device());
      backend::pad_backward(ops::dense(g, dt), gx, p);
      gi.set(0, gx);
    };
  });
  return y;
}

Tensor interpolate(const Tensor& x_in, const InterpolateOptions& options) {
  ops::check_defined("interpolate", {&x_in});
  ops::check_floating("interpolate", x_in);
  if (x_in.ndim() != 4)
    throw ShapeError("interpolate: expected input [N, C, H, W], got " + ops::describe(x_in));
  Shape out_shape;
  const backend::UpsampleParams p = upsample_params(x_in, options, out_shape);
  if (options.mode == InterpolateMode::bicubic) {
    // Validated above with interpolate's errors; the sizes are passed on as given.
    return upsample_bicubic2d(x_in, {.size = options.size,
                                     .scale_factor = options.scale_factor,
                                     .align_corners = options.align_corners});
  }
  Tensor x = x_in;
  amp::autocast_inputs(p.bilinear ? OpKind::upsample_bilinear : OpKind::upsample_nearest, {&x});
  Tensor y = empty(out_shape, x.dtype(), x.device());
  backend::upsample2d_forward(ops::dense(x), y, p);
  const OpKind op = p.bilinear ? OpKind::upsample_bilinear : OpKind::upsample_nearest;
  autodiff::record(op, {&x}, y, [&] {
    return [op, p, options, x_shape = x.shape(), dt = x.dtype()](const Tensor& g, autodiff::InputGrads& gi) {
      Tensor gx = empty(x_shape, dt, g.device());
      backend::upsample2d_backward(ops::dense(g, dt), gx, p);
      if (gi.create_graph())
        ops::record_linear_grad(op, g, gx, [options](const Tensor& gg) { return interpolate(gg, options); });
      gi.set(0, gx);
    };
  });
  return y;
}

}  // namespace mixgrad::F
