// F::upsample_bicubic2d composed of F:: ops: along each axis the output is
// the sum over the 4 taps of index_select(x, axis, tap k's input rows)
// times tap k's weights, both computed on the host from the geometry alone
// (aten's upsample_bicubic2d: area_pixel_compute_source_index without the
// clamp at 0, cubic_convolution1 / 2 with A = -0.75, taps clamped to the
// image). Linear in x: its gradient is index_select's, differentiable again.
#include "mixgrad/ops/upsample_bicubic.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "mixgrad/error.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/elementwise.hpp"
#include "mixgrad/ops/indexing.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

constexpr const char* kOp = "upsample_bicubic2d";
constexpr double kA = -0.75;

double cubic1(double t) { return ((kA + 2) * t - (kA + 3)) * t * t + 1; }          // |t| <= 1
double cubic2(double t) { return ((kA * t - 5 * kA) * t + 8 * kA) * t - 4 * kA; }  // 1 < |t| < 2

// One axis: `in` input rows to `out` output rows. scale_factor 0: none given.
Tensor resample(const Tensor& x, int dim, int64_t out, double scale_factor, bool align_corners) {
  const int64_t in = x.size(dim);
  double scale = 0;
  if (align_corners)
    scale = out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0;
  else
    scale = scale_factor > 0 ? 1.0 / scale_factor : static_cast<double>(in) / static_cast<double>(out);
  std::array<std::vector<int64_t>, 4> taps;
  std::array<std::vector<double>, 4> weights;
  for (int64_t o = 0; o < out; ++o) {
    const double src = align_corners ? scale * static_cast<double>(o) : scale * (static_cast<double>(o) + 0.5) - 0.5;
    const double x0 = std::floor(src), t = src - x0;
    const double w[4] = {cubic2(t + 1), cubic1(t), cubic1(1 - t), cubic2(2 - t)};
    for (int k = 0; k < 4; ++k) {
      taps[static_cast<size_t>(k)].push_back(std::clamp<int64_t>(static_cast<int64_t>(x0) - 1 + k, 0, in - 1));
      weights[static_cast<size_t>(k)].push_back(w[k]);
    }
  }
  Shape along(std::vector<int64_t>(static_cast<size_t>(x.ndim()), 1));
  along[dim] = out;
  Tensor sum;
  for (size_t k = 0; k < 4; ++k) {
    const Tensor rows = index_select(x, dim, tensor(taps[k], Shape{out}).to(x.device()));
    const Tensor w = tensor(weights[k], along, x.dtype()).to(x.device());
    sum = k == 0 ? mul(rows, w) : add(sum, mul(rows, w));
  }
  return sum;
}

void check(const Tensor& x, const UpsampleBicubic2dOptions& o) {
  ops::check_defined(kOp, {&x});
  ops::check_floating(kOp, x);
  auto fail = [&](const std::string& why) {
    throw ShapeError(std::string(kOp) + ": " + why + " (x " + ops::describe(x) + ")");
  };
  if (x.ndim() != 4) fail("x must be [N, C, H, W]");
  if (x.size(-1) < 1 || x.size(-2) < 1) fail("x's image is empty");
  const bool by_size = o.size.h != 0 || o.size.w != 0, by_scale = o.scale_factor.h != 0 || o.scale_factor.w != 0;
  if (by_size == by_scale)
    throw ValueError(std::string(kOp) + ": give exactly one of size and scale_factor (x " + ops::describe(x) + ")");
  if (by_size && (o.size.h < 1 || o.size.w < 1)) fail("size must be positive");
  if (by_scale && (!(o.scale_factor.h > 0) || !(o.scale_factor.w > 0)))
    throw ValueError(std::string(kOp) + ": scale_factor must be positive (x " + ops::describe(x) + ")");
}

}  // namespace

Tensor upsample_bicubic2d(const Tensor& x_in, const UpsampleBicubic2dOptions& o) {
  check(x_in, o);
  const bool by_size = o.size.h != 0;
  const int64_t oh = by_size ? o.size.h : static_cast<int64_t>(std::floor(x_in.size(-2) * o.scale_factor.h));
  const int64_t ow = by_size ? o.size.w : static_cast<int64_t>(std::floor(x_in.size(-1) * o.scale_factor.w));
  if (oh < 1 || ow < 1)
    throw ShapeError(std::string(kOp) + ": the output would be empty (x " + ops::describe(x_in) + ")");
  Tensor x = x_in;
  amp::autocast_inputs(OpKind::upsample_bicubic, {&x});
  const amp::detail::AutocastOff composed;
  // 16-bit images are resampled in float32 (PyTorch's opmath) and rounded once.
  const bool narrow16 = x.dtype() == DType::float16 || x.dtype() == DType::bfloat16;
  const Tensor xm = narrow16 ? astype(x, DType::float32) : x;
  const Tensor across = resample(xm, 3, ow, by_size ? 0.0 : o.scale_factor.w, o.align_corners);
  const Tensor out = resample(across, 2, oh, by_size ? 0.0 : o.scale_factor.h, o.align_corners);
  return narrow16 ? astype(out, x.dtype()) : out;
}

}  // namespace mixgrad::F
