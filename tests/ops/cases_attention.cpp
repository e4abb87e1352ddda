// Registered cases of scaled_dot_product_attention (an nn op: cases_nn.cpp
// collects them). Lengths cross the CPU kernel's 128-row blocks in the long
// cases; the others stay small for the float64 finite differences (two
// forwards per input element, and the second-order check).
#include "op_registry.hpp"

namespace optest {

namespace {

using mg::F::AttentionOptions;
using mg::F::scaled_dot_product_attention;

/// A [rows, cols] keep-mask, true where (i * 7 + j * 3) % 5 != 0, and row
/// `dead` all false (a query that sees no key: its output is 0).
InputSpec keep_mask(mg::Shape shape, int64_t dead) {
  return InputSpec(shape, [shape, dead](mg::DType) {
    const int64_t rows = shape[shape.ndim() - 2], cols = shape[shape.ndim() - 1];
    std::vector<bool> keep(static_cast<size_t>(shape.numel()));
    for (size_t e = 0; e < keep.size(); ++e) {
      const int64_t i = static_cast<int64_t>(e) / cols % rows, j = static_cast<int64_t>(e) % cols;
      keep[e] = i != dead && (i * 7 + j * 3) % 5 != 0;
    }
    return mg::tensor<bool>(keep, shape);
  });
}

OpCase sdpa(std::string name, std::vector<InputSpec> inputs, AttentionOptions o, bool mask_input = false) {
  return {.name = std::move(name),
          .inputs = std::move(inputs),
          .run = [o, mask_input](const Inputs& x) {
            AttentionOptions opts = o;
            if (mask_input) opts.attn_mask = x[3];
            return scaled_dot_product_attention(x[0], x[1], x[2], opts);
          }};
}

}  // namespace

template <>
Cases cases_of<mg::OpKind::scaled_dot_product_attention>() {
  Cases c = {
      sdpa("sdpa", {{2, 3, 5, 4}, {2, 3, 6, 4}, {2, 3, 6, 3}}, {}),
      sdpa("sdpa_causal", {{1, 2, 7, 8}, {1, 2, 7, 8}, {1, 2, 7, 8}}, {.is_causal = true}),
      sdpa("sdpa_bool_mask_dead_row", {{2, 2, 5, 4}, {2, 2, 6, 4}, {2, 2, 6, 4}, keep_mask({5, 6}, 2)}, {}, true),
      sdpa("sdpa_additive_mask", {{1, 2, 4, 4}, {1, 2, 6, 4}, {1, 2, 6, 4}, InputSpec({2, 1, 6}, -2.0, 2.0)}, {},
           true),
      sdpa("sdpa_gqa", {{1, 4, 5, 8}, {1, 2, 6, 8}, {1, 2, 6, 8}}, {.enable_gqa = true}),
      sdpa("sdpa_3d_scale", {{3, 5, 4}, {3, 6, 4}, {3, 6, 2}}, {.scale = 0.7}),
      sdpa("sdpa_2d", {{5, 4}, {3, 4}, {3, 4}}, {}),
      sdpa("sdpa_5d_mask", {{2, 2, 1, 3, 4}, {2, 2, 1, 5, 4}, {2, 2, 1, 5, 4}, keep_mask({2, 1, 1, 3, 5}, 1)}, {},
           true),
      sdpa("sdpa_causal_crosses_blocks", {{1, 1, 130, 4}, {1, 1, 140, 4}, {1, 1, 140, 4}}, {.is_causal = true}),
  };
  c.push_back({.name = "sdpa_transposed_inputs",
               .inputs = {{2, 5, 3, 4}, {2, 6, 3, 4}, {2, 6, 3, 4}},
               .run = [](const Inputs& x) {
                 auto heads_first = [](const mg::Tensor& t) { return mg::F::transpose(t, 1, 2); };
                 return scaled_dot_product_attention(heads_first(x[0]), heads_first(x[1]), heads_first(x[2]));
               }});
  // The heads of one packed [N, L, 3E] projection (as nn::MultiheadAttention
  // makes them): q, k and v read in place, rows 3E apart, heads E/H apart.
  c.push_back({.name = "sdpa_packed_projection_heads",
               .inputs = {{2, 5, 24}},
               .run = [](const Inputs& x) {
                 auto heads = [&](int64_t part) {
                   return mg::F::transpose(mg::F::reshape(mg::F::narrow(x[0], 2, part * 8, 8), {2, 5, 2, 4}), 1, 2);
                 };
                 return scaled_dot_product_attention(heads(0), heads(1), heads(2), {.is_causal = true});
               }});
  // Batch dims swapped: they no longer flatten into one stride (copied dense).
  c.push_back({.name = "sdpa_batch_dims_out_of_order",
               .inputs = {{3, 2, 2, 5, 4}, {3, 2, 2, 6, 4}, {3, 2, 2, 6, 4}},
               .run = [](const Inputs& x) {
                 auto swapped = [](const mg::Tensor& t) { return mg::F::transpose(t, 0, 1); };
                 return scaled_dot_product_attention(swapped(x[0]), swapped(x[1]), swapped(x[2]));
               }});
  c.push_back({.name = "sdpa_long_keys",
               .inputs = {{1, 1, 3, 8}, {1, 1, 270, 8}, {1, 1, 270, 8}},
               .run = [](const Inputs& x) { return scaled_dot_product_attention(x[0], x[1], x[2]); },
               .lowp_tolerance = 2.0});
  return c;
}

}  // namespace optest
