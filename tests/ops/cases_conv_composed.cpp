// Registry cases of conv_transpose1d and conv_tbc (composed of the conv ops
// that have kernels).
#include "op_registry.hpp"

namespace optest {

template <>
Cases cases_of<mg::OpKind::conv_transpose1d>() {
  namespace F = mg::F;
  return {
      {.name = "conv_transpose1d_strided",
       .inputs = {{2, 3, 5}, {3, 2, 3}, {2}},
       .run =
           [](const Inputs& x) {
             return F::conv_transpose1d(x[0], x[1], x[2], {.stride = 2, .padding = 1, .output_padding = 1});
           }},
      {.name = "conv_transpose1d_unbatched_groups_dilation",
       .inputs = {{4, 5}, {4, 1, 2}},
       .run = [](const Inputs& x) {
         return F::conv_transpose1d(x[0], x[1], mg::Tensor(), {.dilation = 2, .groups = 2});
       }},
  };
}

template <>
Cases cases_of<mg::OpKind::conv_tbc>() {
  namespace F = mg::F;
  return {
      {.name = "conv_tbc_padded",
       .inputs = {{5, 2, 3}, {3, 3, 2}, {2}},
       .run = [](const Inputs& x) { return F::conv_tbc(x[0], x[1], x[2], 1); }},
      {.name = "conv_tbc_unpadded",
       .inputs = {{4, 1, 2}, {2, 2, 3}, {3}},
       .run = [](const Inputs& x) { return F::conv_tbc(x[0], x[1], x[2]); }},
  };
}

template <>
Cases cases_of<mg::OpKind::conv3d>() {
  namespace F = mg::F;
  return {
      {.name = "conv3d_padded_strided_dilated",
       .inputs = {{1, 2, 3, 3, 4}, {2, 2, 2, 2, 2}, {2}},
       .run =
           [](const Inputs& x) {
             return F::conv3d(x[0], x[1], x[2], {.stride = {1, 1, 2}, .padding = {1, 0, 1}, .dilation = {2, 1, 1}});
           }},
      {.name = "conv3d_unbatched_groups",
       .inputs = {{4, 2, 3, 3}, {2, 2, 1, 2, 2}},
       .run = [](const Inputs& x) { return F::conv3d(x[0], x[1], mg::Tensor(), {.groups = 2}); }},
  };
}

template <>
Cases cases_of<mg::OpKind::conv_transpose3d>() {
  namespace F = mg::F;
  return {
      {.name = "conv_transpose3d_strided_groups",
       .inputs = {{1, 2, 2, 2, 2}, {2, 1, 2, 1, 2}, {2}},
       .run =
           [](const Inputs& x) {
             return F::conv_transpose3d(x[0], x[1], x[2],
                                        {.stride = {2, 1, 1}, .padding = {1, 0, 0}, .output_padding = {1, 0, 0},
                                         .groups = 2});
           }},
      {.name = "conv_transpose3d_unbatched_dilated",
       .inputs = {{2, 2, 2, 3}, {2, 3, 2, 2, 1}},
       .run = [](const Inputs& x) { return F::conv_transpose3d(x[0], x[1], mg::Tensor(), {.dilation = {2, 1, 1}}); }},
  };
}

}  // namespace optest
