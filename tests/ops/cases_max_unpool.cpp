// Registry cases of max_unpool1d and max_unpool2d (composed of scatter_add):
// the indices are fixed, distinct positions in each output plane, as a
// max_pool with return_indices gives them.
#include <vector>

#include "op_registry.hpp"

namespace optest {

namespace {

// Index i of each [.., P] plane -> position `stride * i + (i % 2)` of the
// output plane: distinct, in range, and not all in the window's corner.
InputSpec plane_indices(mg::Shape shape, int64_t stride) {
  return InputSpec(shape, [shape, stride](mg::DType) {
    const int64_t P = shape[shape.ndim() - 1] * (shape.ndim() == 4 ? shape[2] : 1);
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

}  // namespace optest
