// Registry cases of the views (reshape, transpose, permute, narrow, squeeze,
// unsqueeze, broadcast_to) and the shape and type ops (concat, stack, astype).
#include "op_registry.hpp"

namespace optest {

namespace F = mg::F;

template <>
Cases cases_of<mg::OpKind::reshape>() {
  return {
      {.name = "reshape", .inputs = {{2, 3, 4}}, .run = [](const Inputs& x) { return F::reshape(x[0], {4, -1}); }},
      {.name = "reshape_of_transposed",
       .inputs = {{3, 4}},
       .run = [](const Inputs& x) { return F::reshape(F::transpose(x[0], 0, 1), {12}); }},
      {.name = "flatten", .inputs = {{2, 3, 2, 2}}, .run = [](const Inputs& x) { return F::flatten(x[0], 1); }},
      {.name = "reshape_splits_a_narrowed_dim",  // a view: the heads of one part of a packed projection
       .inputs = {{2, 3, 12}},
       .run = [](const Inputs& x) { return F::reshape(F::narrow(x[0], 2, 4, 4), {2, 3, 2, 2}); }},
      {.name = "reshape_merges_dims_of_a_narrowed_tensor",  // a view
       .inputs = {{4, 3, 5}},
       .run = [](const Inputs& x) { return F::reshape(F::narrow(x[0], 0, 1, 2), {2, 15}); }},
      {.name = "reshape_across_a_gap",  // a copy: the narrowed rows are not one stride apart
       .inputs = {{4, 3, 5}},
       .run = [](const Inputs& x) { return F::reshape(F::narrow(x[0], 2, 1, 3), {36}); }},
  };
}

template <>
Cases cases_of<mg::OpKind::transpose>() {
  return {{.name = "transpose", .inputs = {{2, 3, 4}}, .run = [](const Inputs& x) { return F::transpose(x[0], 0, 2); }}};
}

template <>
Cases cases_of<mg::OpKind::permute>() {
  return {{.name = "permute", .inputs = {{2, 3, 4}}, .run = [](const Inputs& x) { return F::permute(x[0], {1, 2, 0}); }}};
}

template <>
Cases cases_of<mg::OpKind::narrow>() {
  return {{.name = "narrow", .inputs = {{4, 5}}, .run = [](const Inputs& x) { return F::narrow(x[0], 1, 1, 3); }}};
}

template <>
Cases cases_of<mg::OpKind::squeeze>() {
  return {
      {.name = "squeeze_unsqueeze",
       .inputs = {{3, 1, 4}},
       .run = [](const Inputs& x) { return F::unsqueeze(F::squeeze(x[0], 1), 0); }},
      {.name = "squeeze_all", .inputs = {{1, 3, 1, 2}}, .run = [](const Inputs& x) { return F::squeeze(x[0]); }},
  };
}

template <>
Cases cases_of<mg::OpKind::unsqueeze>() {
  return {
      {.name = "unsqueeze_last", .inputs = {{3, 4}}, .run = [](const Inputs& x) { return F::unsqueeze(x[0], -1); }},
      {.name = "unsqueeze_of_transposed",
       .inputs = {{3, 4}},
       .run = [](const Inputs& x) { return F::unsqueeze(F::transpose(x[0], 0, 1), 1) * 2.0; }},
  };
}

template <>
Cases cases_of<mg::OpKind::broadcast_to>() {
  return {{.name = "broadcast_to",
           .inputs = {{3, 1}},
           .run = [](const Inputs& x) { return F::broadcast_to(x[0], {2, 3, 4}); }}};
}

template <>
Cases cases_of<mg::OpKind::concat>() {
  return {
      {.name = "concat", .inputs = {{2, 3}, {4, 3}}, .run = [](const Inputs& x) { return F::concat({x[0], x[1]}, 0); }},
      {.name = "concat_axis1",
       .inputs = {{2, 3}, {2, 1}},
       .run = [](const Inputs& x) { return F::concat({x[0], x[1], x[0]}, -1); }},
  };
}

template <>
Cases cases_of<mg::OpKind::stack>() {
  return {{.name = "stack", .inputs = {{2, 3}, {2, 3}}, .run = [](const Inputs& x) { return F::stack({x[0], x[1]}, 1); }}};
}

// A round trip through float32 and back: in a 16-bit run both directions of
// the conversion; in float64 the step and tolerance allow for float32's
// rounding (about 6e-8 relative, over a step of 1e-2).
template <>
Cases cases_of<mg::OpKind::astype>() {
  return {{.name = "astype_round_trip_float32",
           .inputs = {{3, 4}},
           .run = [](const Inputs& x) { return F::astype(F::astype(x[0], mg::DType::float32), x[0].dtype()); },
           .eps = 1e-2}};
}

std::vector<OpCase> shape_cases() {
  Cases all = family_cases<mg::OpFamily::view>();
  Cases shape = family_cases<mg::OpFamily::shape>();
  all.insert(all.end(), shape.begin(), shape.end());
  return all;
}

}  // namespace optest
