// Registered cases of the neural-network ops: conv2d, conv1d,
// conv_transpose2d, pooling, batch_norm,
// layer_norm, group_norm, instance_norm, dropout, softmax / log_softmax;
// scaled_dot_product_attention's are in cases_attention.cpp.
// Shapes are tiny: the float64 gradient check runs two forwards per input
// element.
#include "op_registry.hpp"

namespace optest {

namespace {

using mg::F::Conv2dOptions;

OpCase conv_case(std::string name, mg::Shape x, mg::Shape w, bool bias, Conv2dOptions o, double lowp = 1.0) {
  std::vector<InputSpec> inputs{x, w};
  if (bias) inputs.push_back(mg::Shape{w[0]});
  return {.name = std::move(name),
          .inputs = inputs,
          .run = [bias, o](const Inputs& in) { return mg::F::conv2d(in[0], in[1], bias ? in[2] : mg::Tensor(), o); },
          .lowp_tolerance = lowp};
}

std::vector<OpCase> conv_cases() {
  return {
      conv_case("conv2d", {2, 3, 5, 5}, {4, 3, 3, 3}, true, {}),
      conv_case("conv2d_padding", {1, 2, 4, 4}, {3, 2, 3, 3}, true, {.padding = 1}),
      conv_case("conv2d_stride_padding_non_square", {1, 2, 6, 5}, {3, 2, 3, 2}, true,
                {.stride = {2, 1}, .padding = {1, 0}}),
      conv_case("conv2d_dilation", {1, 2, 6, 6}, {2, 2, 2, 3}, false, {.padding = 1, .dilation = {2, 1}}),
      conv_case("conv2d_groups", {2, 4, 4, 4}, {6, 2, 3, 3}, true, {.padding = 1, .groups = 2}),
      conv_case("conv2d_depthwise", {1, 3, 4, 4}, {3, 1, 3, 3}, false, {.stride = 2, .padding = 1, .groups = 3}),
      conv_case("conv2d_1x1", {2, 3, 3, 3}, {2, 3, 1, 1}, false, {}),
      // 8 channels x 3x3: a reduction of 72 products, more rounding in bfloat16.
      conv_case("conv2d_many_channels", {1, 8, 4, 4}, {2, 8, 3, 3}, true, {.padding = 1}, 2.0),
  };
}

std::vector<OpCase> conv1d_cases() {
  using mg::F::Conv1dOptions;
  auto conv1d = [](mg::Shape x, mg::Shape w, bool bias, Conv1dOptions o, std::string name) {
    std::vector<InputSpec> inputs{x, w};
    if (bias) inputs.push_back(mg::Shape{w[0]});
    return OpCase{.name = std::move(name),
                  .inputs = inputs,
                  .run = [bias, o](const Inputs& in) {
                    return mg::F::conv1d(in[0], in[1], bias ? in[2] : mg::Tensor(), o);
                  }};
  };
  return {
      conv1d({2, 3, 7}, {4, 3, 3}, true, {}, "conv1d"),
      conv1d({1, 2, 8}, {3, 2, 3}, true, {.stride = 2, .padding = 1}, "conv1d_stride_padding"),
      conv1d({1, 2, 9}, {2, 2, 2}, false, {.padding = 2, .dilation = 3}, "conv1d_dilation"),
      conv1d({2, 4, 6}, {6, 2, 3}, true, {.padding = 1, .groups = 2}, "conv1d_groups"),
  };
}

std::vector<OpCase> conv_transpose2d_cases() {
  using mg::F::ConvTranspose2dOptions;
  auto convt = [](mg::Shape x, mg::Shape w, int64_t groups, bool bias, ConvTranspose2dOptions o, std::string name,
                  double lowp = 1.0) {
    std::vector<InputSpec> inputs{x, w};
    if (bias) inputs.push_back(mg::Shape{w[1] * groups});
    o.groups = groups;
    return OpCase{.name = std::move(name),
                  .inputs = inputs,
                  .run = [bias, o](const Inputs& in) {
                    return mg::F::conv_transpose2d(in[0], in[1], bias ? in[2] : mg::Tensor(), o);
                  },
                  .lowp_tolerance = lowp};
  };
  return {
      convt({2, 3, 3, 3}, {3, 2, 3, 3}, 1, true, {}, "conv_transpose2d"),
      convt({1, 2, 3, 4}, {2, 3, 3, 3}, 1, true, {.stride = 2, .padding = 1, .output_padding = 1},
            "conv_transpose2d_stride_output_padding"),
      convt({1, 2, 3, 3}, {2, 2, 2, 3}, 1, false, {.stride = {1, 2}, .padding = {0, 1}, .dilation = {2, 1}},
            "conv_transpose2d_dilation_non_square"),
      convt({2, 4, 3, 3}, {4, 1, 3, 3}, 2, true, {.stride = 2, .padding = 1}, "conv_transpose2d_groups"),
      // 8 input channels x 3x3 per output: more rounding in bfloat16.
      convt({1, 8, 3, 3}, {8, 2, 3, 3}, 1, true, {.padding = 1}, "conv_transpose2d_many_channels", 2.0),
  };
}

std::vector<OpCase> pooling_cases() {
  using mg::F::Pool2dOptions;
  auto max_pool = [](Pool2dOptions o) { return [o](const Inputs& x) { return mg::F::max_pool2d(x[0], o); }; };
  auto avg_pool = [](Pool2dOptions o) { return [o](const Inputs& x) { return mg::F::avg_pool2d(x[0], o); }; };
  auto adaptive = [](mg::Size2 s) { return [s](const Inputs& x) { return mg::F::adaptive_avg_pool2d(x[0], s); }; };
  return {
      {.name = "max_pool2d", .inputs = {{2, 3, 4, 4}}, .run = max_pool({.kernel_size = 2})},
      {.name = "max_pool2d_overlapping", .inputs = {{1, 2, 5, 5}}, .run = max_pool({.kernel_size = 3, .stride = 1})},
      {.name = "max_pool2d_stride_padding_non_square",
       .inputs = {{1, 2, 5, 6}},
       .run = max_pool({.kernel_size = {3, 2}, .stride = {2, 1}, .padding = {1, 1}})},
      {.name = "avg_pool2d", .inputs = {{2, 2, 4, 4}}, .run = avg_pool({.kernel_size = 2})},
      {.name = "avg_pool2d_padding_excluded",
       .inputs = {{1, 2, 5, 5}},
       .run = avg_pool({.kernel_size = 3, .stride = 2, .padding = 1})},
      {.name = "avg_pool2d_non_square",
       .inputs = {{1, 2, 4, 6}},
       .run = avg_pool({.kernel_size = {2, 3}, .stride = {1, 2}, .padding = {1, 0}})},
      {.name = "max_pool1d", .inputs = {{2, 3, 8}}, .run = [](const Inputs& x) { return mg::F::max_pool1d(x[0]); }},
      {.name = "max_pool1d_overlapping_padding",
       .inputs = {{1, 2, 7}},
       .run = [](const Inputs& x) { return mg::F::max_pool1d(x[0], {.kernel_size = 3, .stride = 2, .padding = 1}); }},
      {.name = "avg_pool1d", .inputs = {{2, 2, 6}}, .run = [](const Inputs& x) { return mg::F::avg_pool1d(x[0]); }},
      {.name = "avg_pool1d_padding_excluded",
       .inputs = {{1, 3, 7}},
       .run = [](const Inputs& x) { return mg::F::avg_pool1d(x[0], {.kernel_size = 3, .stride = 2, .padding = 1}); }},
      {.name = "max_pool3d",
       .inputs = {{1, 2, 4, 4, 4}},
       .run = [](const Inputs& x) { return mg::F::max_pool3d(x[0]); }},
      {.name = "max_pool3d_overlapping_padding_non_cubic",
       .inputs = {{2, 1, 3, 5, 4}},
       .run = [](const Inputs& x) {
         return mg::F::max_pool3d(x[0], {.kernel_size = {3, 3, 2}, .stride = {2, 1, 2}, .padding = {1, 1, 0}});
       }},
      {.name = "avg_pool3d", .inputs = {{1, 2, 4, 4, 2}}, .run = [](const Inputs& x) { return mg::F::avg_pool3d(x[0]); }},
      {.name = "avg_pool3d_padding_excluded",
       .inputs = {{1, 2, 3, 5, 5}},
       .run = [](const Inputs& x) {
         return mg::F::avg_pool3d(x[0], {.kernel_size = {2, 3, 3}, .stride = {1, 2, 2}, .padding = {1, 1, 1}});
       }},
      {.name = "adaptive_avg_pool2d_even", .inputs = {{1, 2, 4, 6}}, .run = adaptive({2, 3})},
      {.name = "adaptive_avg_pool2d_uneven", .inputs = {{1, 2, 5, 7}}, .run = adaptive({3, 4})},
      {.name = "adaptive_avg_pool2d_global", .inputs = {{2, 3, 3, 3}}, .run = adaptive(1)},
  };
}

std::vector<OpCase> batch_norm_cases() {
  using mg::F::batch_norm;
  auto positive = [](mg::Shape s) {
    return InputSpec(s, [s](mg::DType) { return mg::uniform(s, 0.5, 1.5); }, false);
  };
  auto centred = [](mg::Shape s) {
    return InputSpec(s, [s](mg::DType) { return mg::uniform(s, -0.3, 0.3); }, false);
  };
  return {
      // Fresh float32 running statistics per call: the update must not change
      // the result of the next call (the gradient check calls run many times).
      {.name = "batch_norm_training",
       .inputs = {{3, 2, 2, 2}, {2}, {2}},
       .run = [](const Inputs& x) {
         const mg::Device d = x[0].device();
         return batch_norm(x[0], mg::zeros({2}, mg::DType::float32, d), mg::ones({2}, mg::DType::float32, d), x[1], x[2],
                           {.training = true});
       }},
      {.name = "batch_norm_training_2d_no_affine",
       .inputs = {{4, 3}},
       .run = [](const Inputs& x) { return batch_norm(x[0], {}, {}, {}, {}, {.training = true}); }},
      {.name = "batch_norm_training_3d",
       .inputs = {{2, 3, 4}, {3}, {3}},
       .run = [](const Inputs& x) { return batch_norm(x[0], {}, {}, x[1], x[2], {.training = true, .eps = 1e-3}); }},
      {.name = "batch_norm_eval",
       .inputs = {{2, 3, 2, 2}, centred({3}), positive({3}), {3}, {3}},
       .run = [](const Inputs& x) { return batch_norm(x[0], x[1], x[2], x[3], x[4], {.training = false}); }},
      {.name = "batch_norm_eval_weight_only",
       .inputs = {{2, 2, 3}, centred({2}), positive({2}), {2}},
       .run = [](const Inputs& x) { return batch_norm(x[0], x[1], x[2], x[3], {}); }},
      // 16-bit activations with float32 parameters, as autocast leaves them.
      {.name = "batch_norm_float32_params",
       .inputs = {{2, 3, 2, 2}, {3}, {3}},
       .run = [](const Inputs& x) {
         const auto params = x[0].dtype() == mg::DType::float64 ? mg::DType::float64 : mg::DType::float32;
         const mg::Device d = x[0].device();
         return batch_norm(x[0], mg::zeros({3}, mg::DType::float32, d), mg::ones({3}, mg::DType::float32, d),
                           x[1].to(params), x[2].to(params), {.training = true});
       }},
  };
}

std::vector<OpCase> softmax_cases() {
  using mg::F::log_softmax;
  using mg::F::softmax;
  return {
      {.name = "softmax_last_axis", .inputs = {{3, 5}}, .run = [](const Inputs& x) { return softmax(x[0], -1); }},
      {.name = "softmax_middle_axis", .inputs = {{2, 4, 3}}, .run = [](const Inputs& x) { return softmax(x[0], 1); }},
      {.name = "softmax_first_axis", .inputs = {{4, 3}}, .run = [](const Inputs& x) { return softmax(x[0], 0); }},
      {.name = "softmax_large_logits",
       .inputs = {InputSpec({2, 6}, 20.0, 30.0)},
       .run = [](const Inputs& x) { return softmax(x[0], 1); }},
      {.name = "softmax_1d", .inputs = {{7}}, .run = [](const Inputs& x) { return softmax(x[0], 0); }},
      {.name = "log_softmax_last_axis",
       .inputs = {{3, 5}},
       .run = [](const Inputs& x) { return log_softmax(x[0], -1); }},
      {.name = "log_softmax_middle_axis",
       .inputs = {{2, 3, 2, 2}},
       .run = [](const Inputs& x) { return log_softmax(x[0], 1); }},
      {.name = "log_softmax_large_logits",
       .inputs = {InputSpec({3, 4}, -40.0, 40.0)},
       .run = [](const Inputs& x) { return log_softmax(x[0], 0); }},
  };
}

// The cases of `all` whose name starts with `prefix`.
Cases named(const Cases& all, const std::string& prefix) {
  Cases out;
  for (const OpCase& c : all)
    if (c.name.rfind(prefix, 0) == 0) out.push_back(c);
  return out;
}

}  // namespace

template <>
Cases cases_of<mg::OpKind::conv2d>() { return conv_cases(); }
template <>
Cases cases_of<mg::OpKind::conv1d>() { return conv1d_cases(); }
template <>
Cases cases_of<mg::OpKind::conv_transpose2d>() { return conv_transpose2d_cases(); }
template <>
Cases cases_of<mg::OpKind::max_pool2d>() { return named(pooling_cases(), "max_pool2d"); }
template <>
Cases cases_of<mg::OpKind::avg_pool2d>() { return named(pooling_cases(), "avg_pool2d"); }
template <>
Cases cases_of<mg::OpKind::adaptive_avg_pool2d>() { return named(pooling_cases(), "adaptive_avg_pool2d"); }
template <>
Cases cases_of<mg::OpKind::max_pool1d>() { return named(pooling_cases(), "max_pool1d"); }
template <>
Cases cases_of<mg::OpKind::avg_pool1d>() { return named(pooling_cases(), "avg_pool1d"); }
template <>
Cases cases_of<mg::OpKind::max_pool3d>() { return named(pooling_cases(), "max_pool3d"); }
template <>
Cases cases_of<mg::OpKind::avg_pool3d>() { return named(pooling_cases(), "avg_pool3d"); }
template <>
Cases cases_of<mg::OpKind::batch_norm>() { return batch_norm_cases(); }
template <>
Cases cases_of<mg::OpKind::softmax>() { return named(softmax_cases(), "softmax"); }
template <>
Cases cases_of<mg::OpKind::log_softmax>() { return named(softmax_cases(), "log_softmax"); }

template <>
Cases cases_of<mg::OpKind::layer_norm>() {
  namespace F = mg::F;
  return {
      {.name = "layer_norm_affine",
       .inputs = {InputSpec({3, 5}, -2.0, 2.0), InputSpec({5}, 0.5, 1.5), {5}},
       .run = [](const Inputs& x) { return F::layer_norm(x[0], {5}, x[1], x[2]); }},
      {.name = "layer_norm_two_trailing_dims",
       .inputs = {InputSpec({2, 2, 3}, -2.0, 2.0)},
       .run = [](const Inputs& x) { return F::layer_norm(x[0], {2, 3}); }},
  };
}

template <>
Cases cases_of<mg::OpKind::group_norm>() {
  namespace F = mg::F;
  return {
      {.name = "group_norm_affine",
       .inputs = {InputSpec({2, 4, 3}, -2.0, 2.0), InputSpec({4}, 0.5, 1.5), {4}},
       .run = [](const Inputs& x) { return F::group_norm(x[0], 2, x[1], x[2]); }},
      {.name = "group_norm_image_no_affine",
       .inputs = {InputSpec({1, 6, 2, 2}, -2.0, 2.0)},
       .run = [](const Inputs& x) { return F::group_norm(x[0], 3); }},
      {.name = "group_norm_one_group_weight_only",
       .inputs = {InputSpec({2, 3, 2}, -2.0, 2.0), InputSpec({3}, 0.5, 1.5)},
       .run = [](const Inputs& x) { return F::group_norm(x[0], 1, x[1]); }},
  };
}

template <>
Cases cases_of<mg::OpKind::instance_norm>() {
  namespace F = mg::F;
  return {
      {.name = "instance_norm",
       .inputs = {InputSpec({2, 3, 2, 2}, -2.0, 2.0)},
       .run = [](const Inputs& x) { return F::instance_norm(x[0]); }},
      {.name = "instance_norm_affine",
       .inputs = {InputSpec({1, 2, 3, 2}, -2.0, 2.0), InputSpec({2}, 0.5, 1.5), {2}},
       .run = [](const Inputs& x) { return F::instance_norm(x[0], x[1], x[2]); }},
  };
}

// dropout reseeds inside `run`, so every evaluation draws the same mask.
template <>
Cases cases_of<mg::OpKind::dropout>() {
  namespace F = mg::F;
  return {
      {.name = "dropout",
       .inputs = {{4, 6}},
       .run =
           [](const Inputs& x) {
             mg::manual_seed(3);
             return F::dropout(x[0], 0.3);
           },
       .same_on_every_device = false},
  };
}

template <>
Cases cases_of<mg::OpKind::scaled_dot_product_attention>();  // cases_attention.cpp

template <>
Cases cases_of<mg::OpKind::prelu>() {
  auto run = [](const Inputs& x) { return mg::F::prelu(x[0], x[1]); };
  return {
      {.name = "prelu_per_channel", .inputs = {{2, 3, 4}, {3}}, .run = run},
      {.name = "prelu_one_slope", .inputs = {{2, 3, 2, 2}, {1}}, .run = run},
      {.name = "prelu_vector_scalar_slope", .inputs = {{5}, mg::Shape{}}, .run = run},
  };
}

// conv_transpose1d, conv_tbc, conv3d and conv_transpose3d: cases_conv_composed.cpp.
template <>
Cases cases_of<mg::OpKind::conv_transpose1d>();
template <>
Cases cases_of<mg::OpKind::conv_tbc>();
template <>
Cases cases_of<mg::OpKind::conv3d>();
template <>
Cases cases_of<mg::OpKind::conv_transpose3d>();

// max_unpool1d, max_unpool2d and max_unpool3d: cases_max_unpool.cpp.
template <>
Cases cases_of<mg::OpKind::max_unpool1d>();
template <>
Cases cases_of<mg::OpKind::max_unpool2d>();
template <>
Cases cases_of<mg::OpKind::max_unpool3d>();

std::vector<OpCase> nn_cases() { return family_cases<mg::OpFamily::nn>(); }

}  // namespace optest
