// F::conv3d and F::conv_transpose3d composed of the 2-d ones. conv3d: depth tap kd of the kernel reads input
// depths od*stride + kd*dilation (index_select of the depth-padded input),
// seen as a batch of N*OD images [C, H, W] convolved by weight[:, :, kd];
// the KD results are summed and the bias added. conv_transpose3d: tap kd
// maps input depth id to output depth id*stride + kd*dilation - padding;
// each depth slice goes through conv_transpose2d and the results are
// scatter_add-ed into their depths. Every part is a tracked
// F:: op, so the result is differentiable twice. A direct 3-d kernel
// (oneDNN / cuDNN have one) would read each input once instead of KD times;
// left for later.
#include "mixgrad/ops/conv3d.hpp"

#include <string>
#include <vector>

#include "mixgrad/error.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/indexing.hpp"
#include "mixgrad/ops/nn.hpp"
#include "mixgrad/ops/resize.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

constexpr const char* kOp = "conv3d";

template <class E>
[[noreturn]] void fail(const std::string& why, const Tensor& x, const Tensor& w, const Tensor& b) {
  throw E(std::string(kOp) + ": " + why + " (x " + ops::describe(x) + ", weight " + ops::describe(w) +
          (b.defined() ? ", bias " + ops::describe(b) : std::string()) + ")");
}

int64_t output_extent(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }

void check(const Tensor& x, const Tensor& w, const Tensor& b, const Conv3dOptions& o) {
  ops::check_defined(kOp, {&x, &w});
  ops::check_same_device(kOp, {&x, &w});
  if (b.defined()) ops::check_same_device(kOp, {&x, &b});
  for (const Tensor* t : {&x, &w, &b})
    if (t->defined() && !is_floating_point(t->dtype())) fail<DTypeError>("every operand must be floating", x, w, b);
  if (!amp::detail::autocast_active() && (x.dtype() != w.dtype() || (b.defined() && b.dtype() != x.dtype())))
    fail<DTypeError>("the operands' dtypes differ", x, w, b);
  if (x.ndim() != 5 && x.ndim() != 4) fail<ShapeError>("x must be [N, C, D, H, W] or [C, D, H, W]", x, w, b);
  if (w.ndim() != 5) fail<ShapeError>("weight must be [O, C/groups, KD, KH, KW]", x, w, b);
  if (o.groups < 1 || w.size(0) % o.groups != 0 || x.size(-4) != w.size(1) * o.groups)
    fail<ShapeError>("x's channels must be weight's dim 1 times groups, which must divide O", x, w, b);
  if (b.defined() && (b.ndim() != 1 || b.size(0) != w.size(0))) fail<ShapeError>("bias must be [O]", x, w, b);
  const Size3 s = o.stride, p = o.padding, d = o.dilation;
  if (s.d < 1 || s.h < 1 || s.w < 1 || d.d < 1 || d.h < 1 || d.w < 1 || p.d < 0 || p.h < 0 || p.w < 0)
    fail<ValueError>("stride and dilation must be >= 1, padding >= 0", x, w, b);
  if (output_extent(x.size(-3), w.size(2), s.d, p.d, d.d) < 1 || output_extent(x.size(-2), w.size(3), s.h, p.h, d.h) < 1 ||
      output_extent(x.size(-1), w.size(4), s.w, p.w, d.w) < 1)
    fail<ShapeError>("the output would be empty", x, w, b);
}

void check_transpose(const Tensor& x, const Tensor& w, const Tensor& b, const ConvTranspose3dOptions& o) {
  constexpr const char* op = "conv_transpose3d";
  auto fail_t = [&](const std::string& why) {
    return std::string(op) + ": " + why + " (x " + ops::describe(x) + ", weight " + ops::describe(w) +
           (b.defined() ? ", bias " + ops::describe(b) : std::string()) + ")";
  };
  ops::check_defined(op, {&x, &w});
  ops::check_same_device(op, {&x, &w});
  if (b.defined()) ops::check_same_device(op, {&x, &b});
  for (const Tensor* t : {&x, &w, &b})
    if (t->defined() && !is_floating_point(t->dtype())) throw DTypeError(fail_t("every operand must be floating"));
  if (!amp::detail::autocast_active() && (x.dtype() != w.dtype() || (b.defined() && b.dtype() != x.dtype())))
    throw DTypeError(fail_t("the operands' dtypes differ"));
  if (x.ndim() != 5 && x.ndim() != 4) throw ShapeError(fail_t("x must be [N, C, D, H, W] or [C, D, H, W]"));
  if (w.ndim() != 5) throw ShapeError(fail_t("weight must be [C, O/groups, KD, KH, KW]"));
  if (o.groups < 1 || x.size(-4) != w.size(0) || w.size(0) % o.groups != 0)
    throw ShapeError(fail_t("x's channels must equal weight's dim 0, a multiple of groups"));
  if (b.defined() && (b.ndim() != 1 || b.size(0) != w.size(1) * o.groups)) throw ShapeError(fail_t("bias must be [O]"));
  const int64_t s[3] = {o.stride.d, o.stride.h, o.stride.w}, p[3] = {o.padding.d, o.padding.h, o.padding.w},
                op_[3] = {o.output_padding.d, o.output_padding.h, o.output_padding.w},
                d[3] = {o.dilation.d, o.dilation.h, o.dilation.w};
  for (int i = 0; i < 3; ++i) {
    if (s[i] < 1 || d[i] < 1 || p[i] < 0 || op_[i] < 0)
      throw ValueError(fail_t("stride and dilation must be >= 1, padding and output_padding >= 0"));
    if (op_[i] >= s[i] && op_[i] >= d[i])
      throw ValueError(fail_t("output_padding must be smaller than stride or dilation"));
    if ((x.size(i - 3) - 1) * s[i] - 2 * p[i] + d[i] * (w.size(2 + i) - 1) + op_[i] + 1 < 1)
      throw ShapeError(fail_t("the output would be empty"));
  }
}

}  // namespace

Tensor conv3d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const Conv3dOptions& o) {
  check(x_in, w_in, b_in, o);
  Tensor x = x_in, w = w_in, b = b_in;
  amp::autocast_inputs(OpKind::conv3d, {&x, &w, &b});
  const amp::detail::AutocastOff composed;
  const bool batched = x.ndim() == 5;
  if (!batched) x = unsqueeze(x, 0);
  if (o.padding.d > 0) x = pad(x, {0, 0, 0, 0, o.padding.d, o.padding.d});
  const int64_t N = x.size(0), C = x.size(1), H = x.size(3), W = x.size(4);
  const int64_t O = w.size(0), KD = w.size(2);
  const int64_t OD = output_extent(x.size(2), KD, o.stride.d, 0, o.dilation.d);
  Tensor sum;
  for (int64_t kd = 0; kd < KD; ++kd) {
    std::vector<int64_t> depths(static_cast<size_t>(OD));
    for (int64_t od = 0; od < OD; ++od) depths[static_cast<size_t>(od)] = od * o.stride.d + kd * o.dilation.d;
    const Tensor slices = index_select(x, 2, tensor(depths, Shape{OD}).to(x.device()));  // [N, C, OD, H, W]
    const Tensor images = reshape(permute(slices, {0, 2, 1, 3, 4}), Shape{N * OD, C, H, W});
    const Tensor tap = reshape(narrow(w, 2, kd, 1), Shape{O, w.size(1), w.size(3), w.size(4)});
    const Tensor y = conv2d(images, tap, Tensor(),
                            {.stride = {o.stride.h, o.stride.w},
                             .padding = {o.padding.h, o.padding.w},
                             .dilation = {o.dilation.h, o.dilation.w},
                             .groups = o.groups});
    sum = sum.defined() ? add(sum, y) : y;
  }
  const int64_t OH = sum.size(2), OW = sum.size(3);
  Tensor out = permute(reshape(sum, Shape{N, OD, O, OH, OW}), {0, 2, 1, 3, 4});
  if (b.defined()) out = add(out, reshape(b, Shape{1, O, 1, 1, 1}));
  return batched ? out : squeeze(out, 0);
}

Tensor conv_transpose3d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const ConvTranspose3dOptions& o) {
  check_transpose(x_in, w_in, b_in, o);
  Tensor x = x_in, w = w_in, b = b_in;
  amp::autocast_inputs(OpKind::conv_transpose3d, {&x, &w, &b});
  const amp::detail::AutocastOff composed;
  const bool batched = x.ndim() == 5;
  if (!batched) x = unsqueeze(x, 0);
  const int64_t N = x.size(0), C = x.size(1), D = x.size(2), H = x.size(3), W = x.size(4), KD = w.size(2);
  const int64_t full = (D - 1) * o.stride.d + o.dilation.d * (KD - 1) + 1 + o.output_padding.d;  // before padding's crop
  const Tensor images = reshape(permute(x, {0, 2, 1, 3, 4}), Shape{N * D, C, H, W});
  Tensor acc;
  for (int64_t kd = 0; kd < KD; ++kd) {
    const Tensor tap = reshape(narrow(w, 2, kd, 1), Shape{w.size(0), w.size(1), w.size(3), w.size(4)});
    const Tensor y = conv_transpose2d(images, tap, Tensor(),
                                      {.stride = {o.stride.h, o.stride.w},
                                       .padding = {o.padding.h, o.padding.w},
                                       .output_padding = {o.output_padding.h, o.output_padding.w},
                                       .dilation = {o.dilation.h, o.dilation.w},
                                       .groups = o.groups});
    const int64_t O = y.size(1), OH = y.size(2), OW = y.size(3);
    const Tensor y5 = permute(reshape(y, Shape{N, D, O, OH, OW}), {0, 2, 1, 3, 4});  // [N, O, D, OH, OW]
    std::vector<int64_t> depths(static_cast<size_t>(D));
    for (int64_t id = 0; id < D; ++id) depths[static_cast<size_t>(id)] = id * o.stride.d + kd * o.dilation.d;
    const Tensor index = broadcast_to(tensor(depths, Shape{1, 1, D, 1, 1}), y5.shape()).contiguous().to(x.device());
    if (!acc.defined()) acc = zeros(Shape{N, O, full, OH, OW}, y5.dtype(), y5.device());
    acc = scatter_add(acc, 2, index, y5);
  }
  Tensor out = narrow(acc, 2, o.padding.d, full - 2 * o.padding.d);
  if (b.defined()) out = add(out, reshape(b, Shape{1, out.size(1), 1, 1, 1}));
  return batched ? out : squeeze(out, 0);
}

}  // namespace mixgrad::F
