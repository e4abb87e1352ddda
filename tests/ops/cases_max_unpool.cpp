// Registry cases of max_unpool1d, 2d and 3d (composed of scatter_add):
// the indices are fixed, distinct positions in each output plane, as a
// max_pool with return_indices gives them.
#include <vector>

#include "op_registry.hpp"

namespace optest {

namespace {

// Index i of each [.., P] plane -> position `stride * i + (i % 2)` of the
// output plane: distinct, in range, and not all in the window's corner.
// `spatial` trailing dims form a plane (default: 1 up to 3 dims, 2 for 4).
InputSpec plane_indices(mg::Shape shape, int64_t stride, int spatial = 0) {
  if (spatial == 0) spatial = shape.ndim() == 4 ? 2 : 1;
  return InputSpec(shape, [shape, stride, spatial](mg::DType) {
    int64_t P = 1;
    for (int d = shape.ndim() - spatial; d < shape.ndim(); ++d) P *= shape[d];
    std::vector<int64_t> v(static_cast<size_t>(shape.numel()));
    for (size_t k = 0; k < v.size(); ++k) {
      const int64_t i = static_cast<int64_t>(k) % P;
      v[k] = stride * i + (i % 2);
    }
    return mg::tensor(v, shape);
  });
}

}  // namespace

template <>
Cases cases_of<mg::OpKind::max_unpool1d>() {
  namespace F = mg::F;
  return {
      {.name = "max_unpool1d",
       .inputs = {{2, 3, 4}, plane_indices({2, 3, 4}, 2)},
       .run = [](const Inputs& x) { return F::max_unpool1d(x[0], x[1], {.kernel_size = 2}); }},
      {.name = "max_unpool1d_unbatched_output_size",
       .inputs = {{3, 4}, plane_indices({3, 4}, 2)},
       .run = [](const Inputs& x) { return F::max_unpool1d(x[0], x[1], {.kernel_size = 2, .output_size = 9}); }},
  };
}

template <>
Cases cases_of<mg::OpKind::max_unpool2d>() {
  namespace F = mg::F;
  return {
      {.name = "max_unpool2d",
       .inputs = {{2, 2, 2, 3}, plane_indices({2, 2, 2, 3}, 3)},
       .run = [](const Inputs& x) { return F::max_unpool2d(x[0], x[1], {.kernel_size = 3, .stride = 2}); }},
  };
}

template <>
Cases cases_of<mg::OpKind::max_unpool3d>() {
  namespace F = mg::F;
  return {
      // [1, 2, 2, 2, 3] -> [1, 2, 4, 4, 6]: 96 positions a plane, indices up to 3 * 11 + 1.
      {.name = "max_unpool3d",
       .inputs = {{1, 2, 2, 2, 3}, plane_indices({1, 2, 2, 2, 3}, 3, 3)},
       .run = [](const Inputs& x) { return F::max_unpool3d(x[0], x[1], {.kernel_size = 2}); }},
      {.name = "max_unpool3d_unbatched_stride_output_size",
       .inputs = {{2, 2, 2, 2}, plane_indices({2, 2, 2, 2}, 4, 3)},
       .run = [](const Inputs& x) {
         return F::max_unpool3d(x[0], x[1], {.kernel_size = {2, 3, 3}, .stride = {1, 2, 2}, .output_size = {3, 5, 6}});
       }},
  };
}

}  // namespace optest
