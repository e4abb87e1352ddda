// Registered cases of the resizing ops: pad (constant, reflect, replicate,
// circular, on one to three trailing dims) and interpolate (nearest and bilinear, by
// size and by scale factor, up and down, align_corners both ways).
#include "op_registry.hpp"

namespace optest {

namespace {

using mg::F::InterpolateMode;
using mg::F::InterpolateOptions;
using mg::F::PadMode;

OpCase pad_case(std::string name, mg::Shape x, std::vector<int64_t> pads, PadMode mode, double value = 0.0) {
  return {.name = std::move(name),
          .inputs = {x},
          .run = [pads, mode, value](const Inputs& in) { return mg::F::pad(in[0], pads, mode, value); }};
}

OpCase interp_case(std::string name, mg::Shape x, InterpolateOptions o) {
  return {.name = std::move(name), .inputs = {x}, .run = [o](const Inputs& in) { return mg::F::interpolate(in[0], o); }};
}

}  // namespace

template <>
Cases cases_of<mg::OpKind::pad>() {
  return {
      pad_case("pad_constant_last_dim", {2, 5}, {1, 2}, PadMode::constant, 0.5),
      pad_case("pad_constant_two_dims", {1, 2, 3, 3}, {2, 0, 1, 1}, PadMode::constant),
      pad_case("pad_constant_three_dims", {2, 2, 2}, {1, 0, 0, 1, 1, 1}, PadMode::constant, -1.0),
      pad_case("pad_reflect_1d", {2, 3, 4}, {3, 2}, PadMode::reflect),
      pad_case("pad_reflect_2d", {1, 2, 3, 4}, {2, 1, 2, 2}, PadMode::reflect),
      pad_case("pad_replicate_2d", {1, 2, 3, 3}, {2, 3, 1, 2}, PadMode::replicate),
      pad_case("pad_replicate_3d", {1, 1, 2, 2, 3}, {1, 1, 1, 0, 0, 2}, PadMode::replicate),
      pad_case("pad_circular_1d", {2, 3, 4}, {3, 4}, PadMode::circular),
      pad_case("pad_circular_2d", {1, 2, 3, 4}, {2, 1, 0, 3}, PadMode::circular),
      pad_case("pad_circular_3d", {1, 1, 2, 3, 3}, {1, 2, 3, 0, 1, 1}, PadMode::circular),
  };
}

template <>
Cases cases_of<mg::OpKind::upsample_nearest>() {
  return {
      interp_case("upsample_nearest_scale2", {2, 2, 3, 3}, {.scale_factor = 2}),
      interp_case("upsample_nearest_size_uneven", {1, 2, 3, 4}, {.size = {5, 7}}),
      interp_case("upsample_nearest_down", {1, 2, 5, 6}, {.size = {2, 4}}),
      interp_case("upsample_nearest_scale_non_integer", {1, 1, 4, 3}, {.scale_factor = {1.5, 2.5}}),
  };
}

template <>
Cases cases_of<mg::OpKind::upsample_bilinear>() {
  const auto bilinear = InterpolateMode::bilinear;
  return {
      interp_case("upsample_bilinear_scale2", {2, 2, 3, 3}, {.scale_factor = 2, .mode = bilinear}),
      interp_case("upsample_bilinear_align_corners", {1, 2, 3, 4}, {.size = {5, 7}, .mode = bilinear, .align_corners = true}),
      interp_case("upsample_bilinear_down", {1, 2, 5, 6}, {.size = {3, 4}, .mode = bilinear}),
      interp_case("upsample_bilinear_scale_non_integer", {1, 1, 4, 3}, {.scale_factor = {1.5, 2.5}, .mode = bilinear}),
      interp_case("upsample_bilinear_to_one_align_corners", {1, 1, 3, 3},
                  {.size = {1, 2}, .mode = bilinear, .align_corners = true}),
  };
}

// upsample_bicubic and grid_sample: cases_resample.cpp.
template <>
Cases cases_of<mg::OpKind::upsample_bicubic>();
template <>
Cases cases_of<mg::OpKind::grid_sample>();

std::vector<OpCase> resize_cases() { return family_cases<mg::OpFamily::resize>(); }

}  // namespace optest
