// F::conv_transpose1d and F::conv_tbc, composed of the convolutions that
// have kernels: conv_transpose1d is conv_transpose2d on height-1 views,
// conv_tbc is conv1d on [N, C, T] views of its time-first operands. Both are
// differentiable twice through them; autocast applies the op's own entry
// (low precision) and the parts run with autocast off.
#include "mixgrad/ops/conv1d_variants.hpp"

#include <string>

#include "mixgrad/error.hpp"
#include "mixgrad/ops/nn.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

template <class E>
[[noreturn]] void fail(const char* op, const std::string& why, const Tensor& x, const Tensor& w, const Tensor& b) {
  throw E(std::string(op) + ": " + why + " (x " + ops::describe(x) + ", weight " + ops::describe(w) +
          (b.defined() ? ", bias " + ops::describe(b) : std::string()) + ")");
}

void check_common(const char* op, const Tensor& x, const Tensor& w, const Tensor& b) {
  ops::check_defined(op, {&x, &w});
  ops::check_same_device(op, {&x, &w});
  if (b.defined()) ops::check_same_device(op, {&x, &b});
  for (const Tensor* t : {&x, &w, &b})
    if (t->defined() && !is_floating_point(t->dtype())) fail<DTypeError>(op, "every operand must be floating", x, w, b);
  if (!amp::detail::autocast_active() &&
      (x.dtype() != w.dtype() || (b.defined() && b.dtype() != x.dtype())))
    fail<DTypeError>(op, "the operands' dtypes differ", x, w, b);
  if (w.ndim() != 3) fail<ShapeError>(op, "weight must be 3-d", x, w, b);
  if (b.defined() && b.ndim() != 1) fail<ShapeError>(op, "bias must be 1-d", x, w, b);
}

void check_transpose(const Tensor& x, const Tensor& w, const Tensor& b, const ConvTranspose1dOptions& o) {
  constexpr const char* op = "conv_transpose1d";
  check_common(op, x, w, b);
  if (x.ndim() != 2 && x.ndim() != 3) fail<ShapeError>(op, "x must be [N, C, L] or [C, L]", x, w, b);
  if (o.stride < 1 || o.dilation < 1 || o.groups < 1 || o.padding < 0 || o.output_padding < 0)
    fail<ValueError>(op, "stride, dilation and groups must be >= 1, padding and output_padding >= 0", x, w, b);
  if (o.output_padding >= o.stride && o.output_padding >= o.dilation)
    fail<ValueError>(op, "output_padding must be smaller than stride or dilation", x, w, b);
  if (x.size(-2) != w.size(0) || w.size(0) % o.groups != 0)
    fail<ShapeError>(op, "x's channels must equal weight's dim 0, a multiple of groups", x, w, b);
  if (b.defined() && b.size(0) != w.size(1) * o.groups) fail<ShapeError>(op, "bias must have O elements", x, w, b);
  const int64_t out = (x.size(-1) - 1) * o.stride - 2 * o.padding + o.dilation * (w.size(2) - 1) + o.output_padding + 1;
  if (out < 1) fail<ShapeError>(op, "the output would be empty", x, w, b);
}

void check_tbc(const Tensor& x, const Tensor& w, const Tensor& b, int64_t pad) {
  constexpr const char* op = "conv_tbc";
  check_common(op, x, w, b);
  if (!b.defined()) fail<ShapeError>(op, "bias is required", x, w, b);
  if (x.ndim() != 3) fail<ShapeError>(op, "x must be [T, N, C_in]", x, w, b);
  if (pad < 0) fail<ValueError>(op, "pad must be >= 0", x, w, b);
  if (x.size(2) != w.size(1)) fail<ShapeError>(op, "x's channels must equal weight's dim 1", x, w, b);
  if (b.size(0) != w.size(2)) fail<ShapeError>(op, "bias must have C_out = weight's dim 2 elements", x, w, b);
  if (x.size(0) + 2 * pad - w.size(0) + 1 < 1) fail<ShapeError>(op, "the output would be empty", x, w, b);
}

}  // namespace

Tensor conv_transpose1d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const ConvTranspose1dOptions& o) {
  check_transpose(x_in, w_in, b_in, o);
  Tensor x = x_in, w = w_in, b = b_in;
  amp::autocast_inputs(OpKind::conv_transpose1d, {&x, &w, &b});
  const amp::detail::AutocastOff composed;
  const bool batched = x.ndim() == 3;
  const Tensor x4 = unsqueeze(batched ? x : unsqueeze(x, 0), 2);  // [N, C, 1, L]
  const Tensor y = conv_transpose2d(x4, unsqueeze(w, 2), b,
                                    {.stride = {1, o.stride},
                                     .padding = {0, o.padding},
                                     .output_padding = {0, o.output_padding},
                                     .dilation = {1, o.dilation},
                                     .groups = o.groups});
  const Tensor y3 = squeeze(y, 2);
  return batched ? y3 : squeeze(y3, 0);
}

Tensor conv_tbc(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, int64_t pad) {
  check_tbc(x_in, w_in, b_in, pad);
  Tensor x = x_in, w = w_in, b = b_in;
  amp::autocast_inputs(OpKind::conv_tbc, {&x, &w, &b});
  const amp::detail::AutocastOff composed;
  // [T, N, C_in] -> [N, C_in, T]; [K, C_in, C_out] -> [C_out, C_in, K].
  const Tensor y = conv1d(permute(x, {1, 2, 0}), permute(w, {2, 1, 0}), b, {.padding = pad});
  return permute(y, {2, 0, 1});  // [N, C_out, T'] -> [T', N, C_out]
}

}  // namespace mixgrad::F
