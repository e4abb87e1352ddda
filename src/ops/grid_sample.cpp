// F::grid_sample composed of F:: ops. The grid's coordinates are made pixel
// coordinates (tracked), then the padding mode maps each one affinely (the
// map's slope and offset worked out on the host from its value: 1 and 0
// inside, 0 and the border where clipped, +-1 and a shift where reflected),
// so the tracked coordinate keeps PyTorch's gradient (0 where clipped). The
// corner pixels and their validity come from the host values; the values
// are gathered from x ([N, C, H*W]) and weighted by the tracked bilinear
// weights. Differentiable twice in x and grid through gather, mul and add.
#include "mixgrad/ops/grid_sample.hpp"

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

constexpr const char* kOp = "grid_sample";

void check(const Tensor& x, const Tensor& grid) {
  ops::check_defined(kOp, {&x, &grid});
  ops::check_same_device(kOp, {&x, &grid});
  auto why = [&](const std::string& w) {
    return std::string(kOp) + ": " + w + " (x " + ops::describe(x) + ", grid " + ops::describe(grid) + ")";
  };
  if (!is_floating_point(x.dtype()) || !is_floating_point(grid.dtype()))
    throw DTypeError(why("x and grid must be floating"));
  if (x.dtype() != grid.dtype() && !amp::detail::autocast_active()) throw DTypeError(why("x and grid dtypes differ"));
  if (x.ndim() != 4) throw ShapeError(why("x must be [N, C, H, W]"));
  if (grid.ndim() != 4 || grid.size(3) != 2 || grid.size(0) != x.size(0))
    throw ShapeError(why("grid must be [N, OH, OW, 2] with x's N"));
  if (x.size(2) < 1 || x.size(3) < 1) throw ShapeError(why("x's image is empty"));
}

// PyTorch's reflect_coordinates then clip_coordinates, as the affine map
// (slope, offset) that takes `v` to the result.
std::pair<double, double> reflect_and_clip(double v, int64_t size, bool align_corners) {
  const double lo2 = align_corners ? 0.0 : -1.0, hi2 = align_corners ? 2.0 * (size - 1) : 2.0 * size - 1;
  double slope = 1, offset = 0;
  if (lo2 != hi2) {
    const double min = lo2 / 2, span = (hi2 - lo2) / 2;
    const double sign = v - min >= 0 ? 1.0 : -1.0, dist = std::abs(v - min);
    const double flips = std::floor(dist / span);
    if (std::fmod(flips, 2.0) == 0) {
      slope = sign, offset = -sign * min - flips * span + min;  // dist - flips*span + min
    } else {
      slope = -sign, offset = span + sign * min + flips * span + min;  // span - (dist - flips*span) + min
    }
  } else {
    slope = 0, offset = 0;
  }
  const double r = slope * v + offset;
  if (r < 0) return {0.0, 0.0};
  if (r > size - 1) return {0.0, static_cast<double>(size - 1)};
  return {slope, offset};
}

// The pixel coordinate along one axis of `size`, tracked, and its values.
Tensor coordinate(const Tensor& g, int64_t size, const GridSampleOptions& o, std::vector<double>& at) {
  const double half = static_cast<double>(size - 1) / 2;
  const Tensor pixel = add(mul(g, o.align_corners ? half : static_cast<double>(size) / 2), half);
  at = pixel.to_vector<double>();
  if (o.padding_mode == GridSamplePadding::zeros) return pixel;
  std::vector<double> slope(at.size()), offset(at.size());
  for (size_t i = 0; i < at.size(); ++i) {
    std::pair<double, double> m{1.0, 0.0};
    if (o.padding_mode == GridSamplePadding::border)
      m = at[i] < 0 ? std::pair{0.0, 0.0} : at[i] > size - 1 ? std::pair{0.0, static_cast<double>(size - 1)} : m;
    else
      m = reflect_and_clip(at[i], size, o.align_corners);
    slope[i] = m.first, offset[i] = m.second;
    at[i] = m.first * at[i] + m.second;
  }
  const Tensor s = tensor(slope, pixel.shape(), pixel.dtype()).to(pixel.device());
  const Tensor c = tensor(offset, pixel.shape(), pixel.dtype()).to(pixel.device());
  return add(mul(pixel, s), c);
}

// A host coordinate as a pixel index; a non-finite or huge one lies outside.
int64_t pixel_index(double v) { return std::isfinite(v) && std::abs(v) < 1e15 ? static_cast<int64_t>(v) : -1; }

// x's values at pixels (px, py) [N, P] (host), times `weight` [N, 1, P]; 0 outside the image.
Tensor sample(const Tensor& flat, int64_t H, int64_t W, const std::vector<int64_t>& px, const std::vector<int64_t>& py,
              const Tensor& weight) {
  const int64_t N = flat.size(0), C = flat.size(1), P = static_cast<int64_t>(px.size()) / N;
  std::vector<int64_t> index(static_cast<size_t>(N * C * P));
  std::vector<double> valid(px.size());
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t p = 0; p < P; ++p) {
      const size_t i = static_cast<size_t>(n * P + p);
      const bool in = px[i] >= 0 && px[i] < W && py[i] >= 0 && py[i] < H;
      valid[i] = in ? 1.0 : 0.0;
      for (int64_t c = 0; c < C; ++c) index[static_cast<size_t>((n * C + c) * P + p)] = in ? py[i] * W + px[i] : 0;
    }
  }
  const Tensor values = gather(flat, 2, tensor(index, Shape{N, C, P}).to(flat.device()));
  const DType dtype = weight.defined() ? weight.dtype() : flat.dtype();
  const Tensor mask = tensor(valid, Shape{N, 1, P}, dtype).to(flat.device());
  return mul(values, weight.defined() ? mul(weight, mask) : mask);
}

}  // namespace

Tensor grid_sample(const Tensor& x_in, const Tensor& grid_in, const GridSampleOptions& o) {
  check(x_in, grid_in);
  Tensor x = x_in, grid = grid_in;
  amp::autocast_inputs(OpKind::grid_sample, {&x, &grid});
  const amp::detail::AutocastOff composed;
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), OH = grid.size(1), OW = grid.size(2);
  // Coordinates and weights in float32 for 16-bit grids (PyTorch's opmath).
  const DType math = grid.dtype() == DType::float64 ? DType::float64 : DType::float32;
  const Tensor g = reshape(grid.dtype() == math ? grid : astype(grid, math), Shape{N, OH * OW, 2});
  std::vector<double> ax, ay;
  const Tensor ix = coordinate(reshape(narrow(g, 2, 0, 1), Shape{N, 1, OH * OW}), W, o, ax);
  const Tensor iy = coordinate(reshape(narrow(g, 2, 1, 1), Shape{N, 1, OH * OW}), H, o, ay);
  const Tensor flat = reshape(x, Shape{N, C, H * W});
  std::vector<int64_t> px(ax.size()), py(ay.size());
  Tensor out;
  if (o.mode == GridSampleMode::nearest) {
    for (size_t i = 0; i < ax.size(); ++i)
      px[i] = pixel_index(std::nearbyint(ax[i])), py[i] = pixel_index(std::nearbyint(ay[i]));
    out = sample(flat, H, W, px, py, Tensor());
  } else {
    std::vector<double> x0(ax.size()), y0(ay.size()), minus_x0(ax.size()), minus_y0(ay.size());
    for (size_t i = 0; i < ax.size(); ++i) {
      x0[i] = std::floor(ax[i]), y0[i] = std::floor(ay[i]);
      minus_x0[i] = -x0[i], minus_y0[i] = -y0[i];
    }
    // The tracked fractions ix - x0, as an add of -x0: F::sub's backward with
    // an untracked right operand is not recorded as differentiable again.
    const Tensor fx = add(ix, tensor(minus_x0, ix.shape(), ix.dtype()).to(ix.device()));
    const Tensor fy = add(iy, tensor(minus_y0, iy.shape(), iy.dtype()).to(iy.device()));
    const Tensor wx[2] = {add(neg(fx), 1.0), fx}, wy[2] = {add(neg(fy), 1.0), fy};
    for (int dy = 0; dy < 2; ++dy) {
      for (int dx = 0; dx < 2; ++dx) {
        for (size_t i = 0; i < ax.size(); ++i)
          px[i] = pixel_index(x0[i] + dx), py[i] = pixel_index(y0[i] + dy);
        const Tensor term = sample(flat, H, W, px, py, mul(wx[dx], wy[dy]));
        out = out.defined() ? add(out, term) : term;
      }
    }
  }
  out = reshape(out, Shape{N, C, OH, OW});
  return out.dtype() == x.dtype() ? out : astype(out, x.dtype());
}

}  // namespace mixgrad::F
