// Registry cases of upsample_bicubic (F::upsample_bicubic2d and F::
// interpolate's bicubic mode) and grid_sample (composed of index_select and
// gather): both ways of align_corners, every padding mode.
#include "op_registry.hpp"

namespace optest {

template <>
Cases cases_of<mg::OpKind::upsample_bicubic>() {
  namespace F = mg::F;
  return {
      {.name = "upsample_bicubic_size",
       .inputs = {{1, 2, 3, 4}},
       .run = [](const Inputs& x) { return F::upsample_bicubic2d(x[0], {.size = {5, 7}}); }},
      {.name = "upsample_bicubic_scale_align_corners",
       .inputs = {{2, 1, 3, 3}},
       .run = [](const Inputs& x) {
         return F::upsample_bicubic2d(x[0], {.scale_factor = 2.0, .align_corners = true});
       }},
      {.name = "upsample_bicubic_down",
       .inputs = {{1, 1, 6, 5}},
       .run = [](const Inputs& x) { return F::upsample_bicubic2d(x[0], {.size = {3, 2}}); }},
      {.name = "interpolate_bicubic_scale_non_integer",
       .inputs = {{1, 2, 3, 4}},
       .run = [](const Inputs& x) {
         return F::interpolate(x[0], {.scale_factor = {1.5, 2.5}, .mode = F::InterpolateMode::bicubic});
       }},
      {.name = "interpolate_bicubic_size_align_corners",
       .inputs = {{2, 1, 4, 3}},
       .run = [](const Inputs& x) {
         return F::interpolate(x[0], {.size = {3, 5}, .mode = F::InterpolateMode::bicubic, .align_corners = true});
       }},
  };
}

template <>
Cases cases_of<mg::OpKind::grid_sample>() {
  namespace F = mg::F;
  using M = F::GridSampleMode;
  using P = F::GridSamplePadding;
  auto with = [](M mode, P padding, bool align) {
    return [=](const Inputs& x) {
      return F::grid_sample(x[0], x[1], {.mode = mode, .padding_mode = padding, .align_corners = align});
    };
  };
  // Grid points in [-1.3, 1.3]: some outside the image, so each padding acts.
  const InputSpec grid(mg::Shape{2, 3, 2, 2}, -1.3, 1.3);
  InputSpec fixed_grid = grid;
  fixed_grid.differentiable = false;  // nearest: the gradient in grid is 0
  return {
      {.name = "grid_sample_bilinear_zeros", .inputs = {{2, 2, 4, 5}, grid}, .run = with(M::bilinear, P::zeros, false)},
      {.name = "grid_sample_bilinear_border_align",
       .inputs = {{2, 2, 4, 5}, grid},
       .run = with(M::bilinear, P::border, true)},
      {.name = "grid_sample_bilinear_reflection",
       .inputs = {{2, 1, 3, 4}, grid},
       .run = with(M::bilinear, P::reflection, false)},
      {.name = "grid_sample_bilinear_reflection_align",
       .inputs = {{2, 1, 3, 4}, grid},
       .run = with(M::bilinear, P::reflection, true)},
      {.name = "grid_sample_nearest_zeros",
       .inputs = {{2, 2, 4, 5}, fixed_grid},
       .run = with(M::nearest, P::zeros, false)},
  };
}

}  // namespace optest
