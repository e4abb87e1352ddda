// F::max_unpool1d, F::max_unpool2d and F::max_unpool3d composed of F:: ops:
// the values are scatter_add-ed into a zero plane of the output's size at
// their indices ([.., H*W] -> [.., OH*OW], [.., D*H*W] -> [.., OD*OH*OW]),
// so the gradient is a gather at the indices and differentiable again. The
// indices are checked on the host first (one read of them; on CUDA a copy
// to the host).
#include "mixgrad/ops/max_unpool.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "mixgrad/error.hpp"
#include "mixgrad/ops/creation.hpp"
#include "mixgrad/ops/indexing.hpp"
#include "mixgrad/ops/shape_ops.hpp"
#include "ops/op_support.hpp"

namespace mixgrad::F {

namespace {

template <class E>
[[noreturn]] void fail(const char* op, const std::string& why, const Tensor& x, const Tensor& indices) {
  throw E(std::string(op) + ": " + why + " (x " + ops::describe(x) + ", indices " + ops::describe(indices) + ")");
}

struct Geometry {
  int rank;                  // spatial dims: 1, 2 or 3
  int64_t kernel[3], stride[3], padding[3], output_size[3];
};

const char* layouts(int rank) {
  return rank == 3 ? "x must be [N, C, D, H, W] or [C, D, H, W]"
         : rank == 2 ? "x must be [N, C, H, W] or [C, H, W]"
                     : "x must be [N, C, L] or [C, L]";
}

// The output's spatial extents; checks what max_unpool's arguments must be.
std::vector<int64_t> output_extents(const char* op, const Tensor& x, const Tensor& indices, const Geometry& g) {
  ops::check_defined(op, {&x, &indices});
  ops::check_same_device(op, {&x, &indices});
  if (!is_floating_point(x.dtype())) fail<DTypeError>(op, "x must be floating", x, indices);
  if (indices.dtype() != DType::int64) fail<DTypeError>(op, "indices must be int64", x, indices);
  if (x.ndim() != g.rank + 1 && x.ndim() != g.rank + 2)
    fail<ShapeError>(op, layouts(g.rank), x, indices);
  if (x.shape() != indices.shape()) fail<ShapeError>(op, "x and indices must have one shape", x, indices);
  std::vector<int64_t> out;
  for (int d = 0; d < g.rank; ++d) {
    const int64_t k = g.kernel[d], s = g.stride[d] > 0 ? g.stride[d] : k, in = x.size(x.ndim() - g.rank + d);
    if (k < 1 || g.padding[d] < 0) fail<ValueError>(op, "kernel_size must be >= 1, padding >= 0", x, indices);
    const int64_t natural = (in - 1) * s - 2 * g.padding[d] + k;
    const int64_t size = g.output_size[d] > 0 ? g.output_size[d] : natural;
    if (size < 1 || size <= natural - s || size >= natural + s)
      fail<ShapeError>(op, "output_size " + std::to_string(size) + " must be within stride of " + std::to_string(natural),
                       x, indices);
    out.push_back(size);
  }
  return out;
}

void check_indices(const char* op, const Tensor& x, const Tensor& indices, int64_t plane) {
  if (indices.numel() == 0) return;
  const std::vector<int64_t> v = indices.to_vector<int64_t>();
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  if (*lo < 0 || *hi >= plane)
    fail<ShapeError>(op, "index " + std::to_string(*lo < 0 ? *lo : *hi) + " is outside the output plane of " +
                             std::to_string(plane) + " elements",
                     x, indices);
}

Tensor unpool(const char* op, OpKind kind, const Tensor& x_in, const Tensor& indices, const Geometry& g) {
  const std::vector<int64_t> extents = output_extents(op, x_in, indices, g);
  int64_t plane = 1;
  for (int64_t e : extents) plane *= e;
  check_indices(op, x_in, indices, plane);
  Tensor x = x_in;
  amp::autocast_inputs(kind, {&x});
  const amp::detail::AutocastOff composed;
  Shape flat_in, flat_out, out_shape;  // [lead.., H*W], [lead.., OH*OW], [lead.., OH, OW]
  int64_t in_plane = 1;
  for (int d = 0; d < x.ndim(); ++d) {
    if (d >= x.ndim() - g.rank) {
      in_plane *= x.size(d);
      continue;
    }
    flat_in.push_back(x.size(d));
    flat_out.push_back(x.size(d));
    out_shape.push_back(x.size(d));
  }
  flat_in.push_back(in_plane);
  flat_out.push_back(plane);
  for (int64_t e : extents) out_shape.push_back(e);
  const int last = flat_in.ndim() - 1;
  const Tensor scattered = scatter_add(zeros(flat_out, x.dtype(), x.device()), last, reshape(indices, flat_in),
                                       reshape(x, flat_in));
  return reshape(scattered, out_shape);
}

}  // namespace

Tensor max_unpool2d(const Tensor& x, const Tensor& indices, const MaxUnpool2dOptions& o) {
  const Geometry g{2,
                   {o.kernel_size.h, o.kernel_size.w, 0},
                   {o.stride.h, o.stride.w, 0},
                   {o.padding.h, o.padding.w, 0},
                   {o.output_size.h, o.output_size.w, 0}};
  return unpool("max_unpool2d", OpKind::max_unpool2d, x, indices, g);
}

Tensor max_unpool3d(const Tensor& x, const Tensor& indices, const MaxUnpool3dOptions& o) {
  const Geometry g{3,
                   {o.kernel_size.d, o.kernel_size.h, o.kernel_size.w},
                   {o.stride.d, o.stride.h, o.stride.w},
                   {o.padding.d, o.padding.h, o.padding.w},
                   {o.output_size.d, o.output_size.h, o.output_size.w}};
  return unpool("max_unpool3d", OpKind::max_unpool3d, x, indices, g);
}

Tensor max_unpool1d(const Tensor& x, const Tensor& indices, const MaxUnpool1dOptions& o) {
  const Geometry g{1, {o.kernel_size, 0, 0}, {o.stride, 0, 0}, {o.padding, 0, 0}, {o.output_size, 0, 0}};
  return unpool("max_unpool1d", OpKind::max_unpool1d, x, indices, g);
}

}  // namespace mixgrad::F
