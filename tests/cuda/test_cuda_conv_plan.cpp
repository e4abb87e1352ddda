// Host tests of the pure plans behind the CUDA convolution and pooling
// families (src/backend/cuda/conv_plan.hpp). The convolution plan's
// descriptor parameters are executed here with a reference loop that reads
// them as cuDNN does (NCHW dims and strides, padding, stride, dilation,
// groups; cross-correlation) in all three directions, and the pooling
// windows as the kernels of cuda/pooling.cu walk them (forward over a
// window, backward gathering from the outputs that hold an input); both are
// compared with the CPU backend for every shape family of the op registry's
// conv2d, conv1d, conv_transpose2d and pooling cases (tests/ops/cases_nn.cpp).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/conv.hpp"
#include "backend/cuda/conv_plan.hpp"
#include "backend/pooling.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace be = mixgrad::backend;
namespace plan = mixgrad::backend::cuda_plan;

namespace {

const mg::DType kF64 = mg::DType::float64;

std::vector<double> host(const mg::Tensor& t) { return t.to_vector<double>(); }

void check_values(const std::vector<double>& got, const mg::Tensor& want, const std::string& what) {
  const std::vector<double> w = host(want);
  BOOST_TEST_REQUIRE(got.size() == w.size(), what);
  for (size_t i = 0; i < got.size(); ++i)
    BOOST_TEST(std::abs(got[i] - w[i]) <= 1e-10 * (1 + std::abs(w[i])),
               what << " element " << i << ": " << got[i] << " vs " << w[i]);
}

mg::Tensor random(const mg::Shape& s) { return mg::uniform(s, -1.0, 1.0).to(kF64); }

// ---- convolution: the plan read as cuDNN reads its descriptors ---------------

int64_t at(const plan::Desc4& d, int64_t a, int64_t b, int64_t c, int64_t e) {
  return a * d.strides[0] + b * d.strides[1] + c * d.strides[2] + e * d.strides[3];
}

enum class Dir { forward, backward_data, backward_weights };

// One loop over every (output, filter tap) pair: the forward accumulates
// into y, backward-data scatters gy * w into gx, backward-weights gy * x into
// gw. `x`, `w`, `y` are the three operands in the plan's roles.
void run_conv_plan(const plan::ConvDescPlan& p, Dir dir, std::vector<double>& x, std::vector<double>& w,
                   std::vector<double>& y) {
  const int n = p.x.dims[0], c = p.x.dims[1], h = p.x.dims[2], wd = p.x.dims[3];
  const int o_all = p.y.dims[1], oh_n = p.y.dims[2], ow_n = p.y.dims[3];
  const int cg = p.w[1], kh_n = p.w[2], kw_n = p.w[3], og = o_all / p.groups;
  BOOST_TEST_REQUIRE(cg * p.groups == c);
  const plan::Desc4 wdesc{p.w, {p.w[1] * p.w[2] * p.w[3], p.w[2] * p.w[3], p.w[3], 1}};
  if (dir == Dir::forward) std::fill(y.begin(), y.end(), 0.0);
  if (dir == Dir::backward_data) std::fill(x.begin(), x.end(), 0.0);
  if (dir == Dir::backward_weights) std::fill(w.begin(), w.end(), 0.0);
  for (int b = 0; b < n; ++b)
    for (int o = 0; o < o_all; ++o) {
      const int g = o / og;
      for (int oh = 0; oh < oh_n; ++oh)
        for (int ow = 0; ow < ow_n; ++ow) {
          double& yv = y[at(p.y, b, o, oh, ow)];
          for (int ci = 0; ci < cg; ++ci)
            for (int kh = 0; kh < kh_n; ++kh) {
              const int ih = oh * p.stride[0] - p.pad[0] + kh * p.dilation[0];
              if (ih < 0 || ih >= h) continue;
              for (int kw = 0; kw < kw_n; ++kw) {
                const int iw = ow * p.stride[1] - p.pad[1] + kw * p.dilation[1];
                if (iw < 0 || iw >= wd) continue;
                double& xv = x[at(p.x, b, g * cg + ci, ih, iw)];
                double& wv = w[at(wdesc, o, ci, kh, kw)];
                if (dir == Dir::forward) yv += xv * wv;
                else if (dir == Dir::backward_data) xv += yv * wv;
                else wv += yv * xv;
              }
            }
        }
    }
}

// A conv2d as the backend sees it: 4-d operand shapes and geometry.
struct ConvCase {
  std::string name;
  mg::Shape x4, w4;
  be::Conv2dParams p;
  mg::Shape y_user;  // the op's output shape on the CPU (F::conv2d / conv1d)
};

be::Conv2dParams params(mg::Size2 s, mg::Size2 pad, mg::Size2 d, int64_t groups) {
  return {{s.h, s.w}, {pad.h, pad.w}, {d.h, d.w}, groups};
}

ConvCase conv2d_case(std::string name, mg::Shape x, mg::Shape w, mg::F::Conv2dOptions o) {
  const mg::Tensor y = mg::F::conv2d(random(x), random(w), mg::Tensor(), o);
  return {std::move(name), x, w, params(o.stride, o.padding, o.dilation, o.groups), y.shape()};
}

// conv1d: a height-1 conv2d (ops/conv.cpp's views).
ConvCase conv1d_case(std::string name, mg::Shape x, mg::Shape w, mg::F::Conv1dOptions o) {
  const mg::Tensor y = mg::F::conv1d(random(x), random(w), mg::Tensor(), o);
  return {std::move(name), mg::Shape{x[0], x[1], 1, x[2]}, mg::Shape{w[0], w[1], 1, w[2]},
          params({1, o.stride}, {0, o.padding}, {1, o.dilation}, o.groups), y.shape()};
}

// The registry's conv2d and conv1d shape families (tests/ops/cases_nn.cpp).
std::vector<ConvCase> conv_cases() {
  return {
      conv2d_case("conv2d", {2, 3, 5, 5}, {4, 3, 3, 3}, {}),
      conv2d_case("conv2d_padding", {1, 2, 4, 4}, {3, 2, 3, 3}, {.padding = 1}),
      conv2d_case("conv2d_stride_padding_non_square", {1, 2, 6, 5}, {3, 2, 3, 2}, {.stride = {2, 1}, .padding = {1, 0}}),
      conv2d_case("conv2d_dilation", {1, 2, 6, 6}, {2, 2, 2, 3}, {.padding = 1, .dilation = {2, 1}}),
      conv2d_case("conv2d_groups", {2, 4, 4, 4}, {6, 2, 3, 3}, {.padding = 1, .groups = 2}),
      conv2d_case("conv2d_depthwise", {1, 3, 4, 4}, {3, 1, 3, 3}, {.stride = 2, .padding = 1, .groups = 3}),
      conv2d_case("conv2d_1x1", {2, 3, 3, 3}, {2, 3, 1, 1}, {}),
      conv2d_case("conv2d_many_channels", {1, 8, 4, 4}, {2, 8, 3, 3}, {.padding = 1}),
      conv1d_case("conv1d", {2, 3, 7}, {4, 3, 3}, {}),
      conv1d_case("conv1d_stride_padding", {1, 2, 8}, {3, 2, 3}, {.stride = 2, .padding = 1}),
      conv1d_case("conv1d_dilation", {1, 2, 9}, {2, 2, 2}, {.padding = 2, .dilation = 3}),
      conv1d_case("conv1d_groups", {2, 4, 6}, {6, 2, 3}, {.padding = 1, .groups = 2}),
  };
}

mg::Shape out4(const ConvCase& c) {
  return {c.x4[0], c.w4[0], plan::conv_out_extent(c.x4[2], c.w4[2], c.p.stride.h, c.p.padding.h, c.p.dilation.h),
          plan::conv_out_extent(c.x4[3], c.w4[3], c.p.stride.w, c.p.padding.w, c.p.dilation.w)};
}

// ---- pooling ------------------------------------------------------------------

struct PoolCase {
  std::string name;
  mg::Shape x4;
  be::Pool2dParams p;
};

be::Pool2dParams pool(mg::Size2 k, mg::Size2 s, mg::Size2 pad) { return {{k.h, k.w}, {s.h, s.w}, {pad.h, pad.w}}; }

// The 2-d geometries the registry's max/avg pool cases reach the backend
// with: 2-d directly, 1-d as height-1 windows, 3-d as an (H, W) pass on
// [N*C, D, H, W] and a depth pass on [N*C, 1, D, OH*OW] (ops/pooling.cpp).
std::vector<PoolCase> pool_cases() {
  return {
      {"pool2d", {2, 3, 4, 4}, pool({2, 2}, {2, 2}, {0, 0})},
      {"pool2d_overlapping", {1, 2, 5, 5}, pool({3, 3}, {1, 1}, {0, 0})},
      {"pool2d_stride_padding_non_square", {1, 2, 5, 6}, pool({3, 2}, {2, 1}, {1, 1})},
      {"avg_pool2d_padding_excluded", {1, 2, 5, 5}, pool({3, 3}, {2, 2}, {1, 1})},
      {"avg_pool2d_non_square", {1, 2, 4, 6}, pool({2, 3}, {1, 2}, {1, 0})},
      {"pool1d", {2, 3, 1, 8}, pool({1, 2}, {1, 2}, {0, 0})},
      {"pool1d_overlapping_padding", {1, 2, 1, 7}, pool({1, 3}, {1, 2}, {0, 1})},
      {"pool3d_hw", {2, 4, 4, 4}, pool({2, 2}, {2, 2}, {0, 0})},
      {"pool3d_depth", {2, 1, 4, 4}, pool({2, 1}, {2, 1}, {0, 0})},
      {"pool3d_non_cubic_hw", {2, 3, 5, 4}, pool({3, 2}, {1, 2}, {1, 0})},
      {"pool3d_non_cubic_depth", {2, 1, 3, 10}, pool({3, 1}, {2, 1}, {1, 0})},
  };
}

mg::Shape pool_out4(const PoolCase& c) {
  return {c.x4[0], c.x4[1], plan::conv_out_extent(c.x4[2], c.p.kernel.h, c.p.stride.h, c.p.padding.h, 1),
          plan::conv_out_extent(c.x4[3], c.p.kernel.w, c.p.stride.w, c.p.padding.w, 1)};
}

// Window walkers of the kernels: fixed or adaptive, per axis.
struct Walk {
  bool adaptive;
  be::Pool2dParams p;
  int64_t h, w, oh, ow;
  void window(int64_t o_h, int64_t o_w, int64_t& h0, int64_t& h1, int64_t& w0, int64_t& w1) const {
    if (adaptive) {
      plan::adaptive_window(o_h, h, oh, h0, h1);
      plan::adaptive_window(o_w, w, ow, w0, w1);
    } else {
      plan::fixed_window(o_h, p.kernel.h, p.stride.h, p.padding.h, h, h0, h1);
      plan::fixed_window(o_w, p.kernel.w, p.stride.w, p.padding.w, w, w0, w1);
    }
  }
  void outputs(int64_t ih, int64_t iw, int64_t& o0, int64_t& o1, int64_t& q0, int64_t& q1) const {
    if (adaptive) {
      plan::adaptive_outputs_of(ih, h, oh, o0, o1);
      plan::adaptive_outputs_of(iw, w, ow, q0, q1);
    } else {
      plan::fixed_outputs_of(ih, p.kernel.h, p.stride.h, p.padding.h, oh, o0, o1);
      plan::fixed_outputs_of(iw, p.kernel.w, p.stride.w, p.padding.w, ow, q0, q1);
    }
  }
};

// pooling.cu's four kernels, on the host.
void ref_max_forward(const Walk& k, int64_t planes, const std::vector<double>& x, std::vector<double>& y,
                     std::vector<int32_t>& argmax) {
  for (int64_t c = 0; c < planes; ++c)
    for (int64_t a = 0; a < k.oh; ++a)
      for (int64_t b = 0; b < k.ow; ++b) {
        int64_t h0, h1, w0, w1;
        k.window(a, b, h0, h1, w0, w1);
        int64_t best_at = -1;
        double best = -INFINITY;
        for (int64_t i = h0; i < h1; ++i)
          for (int64_t j = w0; j < w1; ++j) {
            const double v = x[(c * k.h + i) * k.w + j];
            if (best_at < 0 || v > best) best = v, best_at = i * k.w + j;
          }
        const int64_t o = (c * k.oh + a) * k.ow + b;
        y[o] = best;
        argmax[o] = static_cast<int32_t>(best_at);
      }
}
void ref_max_backward(const Walk& k, int64_t planes, const std::vector<double>& gy, const std::vector<int32_t>& argmax,
                      std::vector<double>& gx) {
  for (int64_t c = 0; c < planes; ++c)
    for (int64_t i = 0; i < k.h; ++i)
      for (int64_t j = 0; j < k.w; ++j) {
        int64_t o0, o1, q0, q1;
        k.outputs(i, j, o0, o1, q0, q1);
        double acc = 0;
        for (int64_t a = o0; a < o1; ++a)
          for (int64_t b = q0; b < q1; ++b) {
            const int64_t o = (c * k.oh + a) * k.ow + b;
            if (argmax[o] == i * k.w + j) acc += gy[o];
          }
        gx[(c * k.h + i) * k.w + j] = acc;
      }
}
void ref_avg_forward(const Walk& k, int64_t planes, const std::vector<double>& x, std::vector<double>& y) {
  for (int64_t c = 0; c < planes; ++c)
    for (int64_t a = 0; a < k.oh; ++a)
      for (int64_t b = 0; b < k.ow; ++b) {
        int64_t h0, h1, w0, w1;
        k.window(a, b, h0, h1, w0, w1);
        double s = 0;
        for (int64_t i = h0; i < h1; ++i)
          for (int64_t j = w0; j < w1; ++j) s += x[(c * k.h + i) * k.w + j];
        const int64_t count = (h1 - h0) * (w1 - w0);
        y[(c * k.oh + a) * k.ow + b] = count > 0 ? s / static_cast<double>(count) : 0.0;
      }
}
void ref_avg_backward(const Walk& k, int64_t planes, const std::vector<double>& gy, std::vector<double>& gx) {
  for (int64_t c = 0; c < planes; ++c)
    for (int64_t i = 0; i < k.h; ++i)
      for (int64_t j = 0; j < k.w; ++j) {
        int64_t o0, o1, q0, q1;
        k.outputs(i, j, o0, o1, q0, q1);
        double acc = 0;
        for (int64_t a = o0; a < o1; ++a)
          for (int64_t b = q0; b < q1; ++b) {
            int64_t h0, h1, w0, w1;
            k.window(a, b, h0, h1, w0, w1);
            const int64_t count = (h1 - h0) * (w1 - w0);
            if (count > 0) acc += gy[(c * k.oh + a) * k.ow + b] / static_cast<double>(count);
          }
        gx[(c * k.h + i) * k.w + j] = acc;
      }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_conv_plan)

BOOST_AUTO_TEST_CASE(descriptors_match_the_cpu_shapes_for_every_registry_family) {
  for (const ConvCase& c : conv_cases()) {
    BOOST_TEST_CONTEXT(c.name) {
      const mg::Shape y4 = out4(c);
      const plan::ConvDescPlan p = plan::make_conv_desc_plan(c.x4, c.w4, y4, c.p);
      // The output descriptor holds the CPU op's output, seen in 4-d.
      int64_t numel = 1;
      for (int64_t d : c.y_user) numel *= d;
      BOOST_TEST(int64_t{p.y.dims[0]} * p.y.dims[1] * p.y.dims[2] * p.y.dims[3] == numel);
      BOOST_TEST(p.y.dims[0] == c.y_user[0]);
      BOOST_TEST(p.y.dims[1] == c.y_user[1]);
      BOOST_TEST(p.y.dims[3] == c.y_user[c.y_user.ndim() - 1]);
      // Packed NCHW strides, filter [O, C/groups, KH, KW], geometry as given.
      BOOST_TEST(p.x.strides[3] == 1);
      BOOST_TEST(p.x.strides[2] == p.x.dims[3]);
      BOOST_TEST(p.x.strides[1] == p.x.dims[2] * p.x.dims[3]);
      BOOST_TEST(p.x.strides[0] == p.x.dims[1] * p.x.dims[2] * p.x.dims[3]);
      BOOST_TEST(p.y.strides[0] == p.y.dims[1] * p.y.dims[2] * p.y.dims[3]);
      BOOST_TEST(p.w[1] * p.groups == p.x.dims[1]);
      BOOST_TEST(p.pad[0] == c.p.padding.h);
      BOOST_TEST(p.pad[1] == c.p.padding.w);
      BOOST_TEST(p.stride[0] == c.p.stride.h);
      BOOST_TEST(p.dilation[1] == c.p.dilation.w);
      BOOST_TEST(p.groups == c.p.groups);
    }
  }
}

// The heuristic's result to run: statuses, workspace limit and, for
// float32, FMA math only (the values stand for cuDNN's enums).
BOOST_AUTO_TEST_CASE(the_usable_algorithm_is_the_first_successful_one_that_fits_and_has_the_asked_math) {
  struct Perf {
    int status;
    size_t memory;
    int mathType;
  };
  constexpr int kOk = 0, kFailed = 3, kDefault = 0, kTensorOp = 1, kFma = 3;
  const std::vector<Perf> perf = {
      {kFailed, 0, kFma}, {kOk, 1000, kFma}, {kOk, 10, kTensorOp}, {kOk, 10, kFma}, {kOk, 0, kDefault}};
  const int n = static_cast<int>(perf.size());
  // Any math type: the first success within the workspace limit.
  BOOST_TEST(plan::usable_algorithm(perf.data(), n, kOk, 100, -1) == 2);
  BOOST_TEST(plan::usable_algorithm(perf.data(), n, kOk, 1000, -1) == 1);
  // FMA only: the tensor-op (TF32) result is skipped, whatever its cost.
  BOOST_TEST(plan::usable_algorithm(perf.data(), n, kOk, 100, kFma) == 3);
  BOOST_TEST(plan::usable_algorithm(perf.data(), n, kOk, 1000, kFma) == 1);
  BOOST_TEST(perf[static_cast<size_t>(plan::usable_algorithm(perf.data(), n, kOk, 100, kFma))].mathType == kFma);
  // Nothing fits: -1 (the backend then throws DeviceError).
  BOOST_TEST(plan::usable_algorithm(perf.data(), n, kOk, 5, kFma) == -1);
  BOOST_TEST(plan::usable_algorithm(perf.data(), 1, kOk, 1000, -1) == -1);
  BOOST_TEST(plan::usable_algorithm(perf.data(), 0, kOk, 1000, -1) == -1);
}

BOOST_AUTO_TEST_CASE(conv2d_and_conv1d_plans_executed_match_the_cpu_in_every_direction) {
  for (const ConvCase& c : conv_cases()) {
    BOOST_TEST_CONTEXT(c.name) {
      const mg::Shape y4 = out4(c);
      const plan::ConvDescPlan p = plan::make_conv_desc_plan(c.x4, c.w4, y4, c.p);
      const mg::Tensor x = random(c.x4), w = random(c.w4), b = random({c.w4[0]}), gy = random(y4);
      std::vector<double> xv = host(x), wv = host(w), yv(static_cast<size_t>(gy.numel()));
      run_conv_plan(p, Dir::forward, xv, wv, yv);
      // The bias as the element-wise kernel adds it: one value per output channel.
      const std::vector<double> bv = host(b);
      for (int n = 0; n < p.y.dims[0]; ++n)
        for (int o = 0; o < p.y.dims[1]; ++o)
          for (int i = 0; i < p.y.dims[2]; ++i)
            for (int j = 0; j < p.y.dims[3]; ++j) yv[at(p.y, n, o, i, j)] += bv[static_cast<size_t>(o)];
      const mg::Tensor y = mg::empty(y4, kF64);
      be::conv2d_forward(x, w, b, y, c.p);
      check_values(yv, y, "forward");

      std::vector<double> gyv = host(gy), gxv(static_cast<size_t>(x.numel()));
      run_conv_plan(p, Dir::backward_data, gxv, wv, gyv);
      const mg::Tensor gx = mg::empty(c.x4, kF64);
      be::conv2d_backward_data(gy, w, gx, c.p);
      check_values(gxv, gx, "backward data");

      std::vector<double> gwv(static_cast<size_t>(w.numel()));
      run_conv_plan(p, Dir::backward_weights, xv, gwv, gyv);
      const mg::Tensor gw = mg::empty(c.w4, kF64);
      be::conv2d_backward_weights(gy, x, gw, mg::Tensor(), c.p);
      check_values(gwv, gw, "backward weights");
    }
  }
}

BOOST_AUTO_TEST_CASE(conv_transpose2d_is_the_backward_data_plan_with_roles_swapped) {
  struct T {
    std::string name;
    mg::Shape x, w;
    int64_t groups;
    mg::F::ConvTranspose2dOptions o;
  };
  const std::vector<T> cases = {
      {"conv_transpose2d", {2, 3, 3, 3}, {3, 2, 3, 3}, 1, {}},
      {"stride_output_padding", {1, 2, 3, 4}, {2, 3, 3, 3}, 1, {.stride = 2, .padding = 1, .output_padding = 1}},
      {"dilation_non_square", {1, 2, 3, 3}, {2, 2, 2, 3}, 1, {.stride = {1, 2}, .padding = {0, 1}, .dilation = {2, 1}}},
      {"groups", {2, 4, 3, 3}, {4, 1, 3, 3}, 2, {.stride = 2, .padding = 1}},
      {"many_channels", {1, 8, 3, 3}, {8, 2, 3, 3}, 1, {.padding = 1}},
  };
  for (const T& c : cases) {
    BOOST_TEST_CONTEXT(c.name) {
      mg::F::ConvTranspose2dOptions o = c.o;
      o.groups = c.groups;
      const mg::Tensor x = random(c.x), w = random(c.w);
      const mg::Tensor y = mg::F::conv_transpose2d(x, w, mg::Tensor(), o);
      // conv2d's input is the transposed conv's output, its output the input.
      const be::Conv2dParams p2 = params(o.stride, o.padding, o.dilation, o.groups);
      const plan::ConvDescPlan p = plan::make_conv_desc_plan(y.shape(), c.w, c.x, p2);
      BOOST_TEST(p.x.dims[1] == y.shape()[1]);
      std::vector<double> yv(static_cast<size_t>(y.numel())), wv = host(w), xv = host(x);
      run_conv_plan(p, Dir::backward_data, yv, wv, xv);
      check_values(yv, y, "transposed forward");
    }
  }
}

BOOST_AUTO_TEST_CASE(descriptors_refuse_shapes_that_do_not_fit) {
  const be::Conv2dParams p{};
  // Output extent not the formula's, channels not fitting groups, beyond int.
  BOOST_CHECK_THROW(plan::make_conv_desc_plan({1, 2, 5, 5}, {3, 2, 3, 3}, {1, 3, 4, 4}, p), mg::ShapeError);
  BOOST_CHECK_THROW(plan::make_conv_desc_plan({1, 3, 5, 5}, {3, 2, 3, 3}, {1, 3, 3, 3}, p), mg::ShapeError);
  BOOST_CHECK_THROW(plan::make_conv_desc_plan({1, 2, 5, 5}, {3, 2, 3, 3}, {2, 3, 3, 3}, p), mg::ShapeError);
  const int64_t big = int64_t{1} << 31;
  BOOST_CHECK_THROW(plan::make_conv_desc_plan({1, 1, 1, big}, {1, 1, 1, 1}, {1, 1, 1, big}, p), mg::ShapeError);
  BOOST_CHECK_NO_THROW(plan::make_conv_desc_plan({1, 2, 5, 5}, {3, 2, 3, 3}, {1, 3, 3, 3}, p));
  BOOST_TEST(plan::conv_out_extent(5, 3, 2, 1, 2) == 2);  // (5 + 2 - 4 - 1) / 2 + 1
  BOOST_TEST(plan::conv_out_extent(2, 3, 1, 0, 1) == 0);
}

// Channels-last activations: cuDNN's descriptors get NHWC strides (dims
// still N, C, H, W), and a channels-last weight the NHWC filter format; the
// strides are those of mg::memory_format_strides.
BOOST_AUTO_TEST_CASE(channels_last_descriptors_have_nhwc_strides) {
  const be::Conv2dParams p{};
  const plan::ConvDescPlan nchw = plan::make_conv_desc_plan({2, 3, 5, 6}, {4, 3, 3, 3}, {2, 4, 3, 4}, p);
  BOOST_TEST((nchw.x.strides == std::array<int, 4>{90, 30, 6, 1}));
  BOOST_TEST(!nchw.filter_nhwc);
  const plan::ConvDescPlan nhwc = plan::make_conv_desc_plan({2, 3, 5, 6}, {4, 3, 3, 3}, {2, 4, 3, 4}, p, true, true);
  BOOST_TEST((nhwc.x.dims == std::array<int, 4>{2, 3, 5, 6}));
  BOOST_TEST((nhwc.x.strides == std::array<int, 4>{90, 1, 18, 3}));
  BOOST_TEST((nhwc.y.strides == std::array<int, 4>{48, 1, 16, 4}));
  BOOST_TEST(nhwc.filter_nhwc);
  const mg::Shape want = mg::memory_format_strides({2, 4, 3, 4}, mg::MemoryFormat::channels_last);
  for (int i = 0; i < 4; ++i) BOOST_TEST(nhwc.y.strides[i] == want[i]);
}

BOOST_AUTO_TEST_CASE(backward_ranges_hold_exactly_the_outputs_whose_window_holds_an_input) {
  // Brute force over fixed geometries (padding at most half the kernel, as
  // the ops allow) and adaptive ones, shrinking and growing.
  for (int64_t in = 1; in <= 9; ++in)
    for (int64_t k = 1; k <= 4; ++k)
      for (int64_t s = 1; s <= 3; ++s)
        for (int64_t pad = 0; pad <= k / 2; ++pad) {
          const int64_t out = plan::conv_out_extent(in, k, s, pad, 1);
          for (int64_t i = 0; i < in; ++i) {
            int64_t o0, o1;
            plan::fixed_outputs_of(i, k, s, pad, out, o0, o1);
            for (int64_t o = 0; o < out; ++o) {
              int64_t f, l;
              plan::fixed_window(o, k, s, pad, in, f, l);
              BOOST_TEST((f <= i && i < l) == (o0 <= o && o < o1),
                         "in " << in << " k " << k << " s " << s << " p " << pad << " i " << i << " o " << o);
            }
          }
        }
  for (int64_t in = 1; in <= 12; ++in)
    for (int64_t out = 1; out <= 12; ++out)
      for (int64_t i = 0; i < in; ++i) {
        int64_t o0, o1;
        plan::adaptive_outputs_of(i, in, out, o0, o1);
        for (int64_t o = 0; o < out; ++o) {
          int64_t f, l;
          plan::adaptive_window(o, in, out, f, l);
          BOOST_TEST((f <= i && i < l) == (o0 <= o && o < o1), "in " << in << " out " << out << " i " << i);
        }
      }
}

BOOST_AUTO_TEST_CASE(pool_kernels_executed_match_the_cpu_for_every_registry_family) {
  for (const PoolCase& c : pool_cases()) {
    BOOST_TEST_CONTEXT(c.name) {
      const mg::Shape y4 = pool_out4(c);
      const int64_t planes = c.x4[0] * c.x4[1];
      const Walk k{false, c.p, c.x4[2], c.x4[3], y4[2], y4[3]};
      const mg::Tensor x = random(c.x4), gy = random(y4);
      const std::vector<double> xv = host(x), gyv = host(gy);
      std::vector<double> yv(static_cast<size_t>(gy.numel())), gxv(static_cast<size_t>(x.numel()));
      std::vector<int32_t> argmax(yv.size());

      ref_max_forward(k, planes, xv, yv, argmax);
      const mg::Tensor y = mg::empty(y4, kF64), gx = mg::empty(c.x4, kF64);
      const be::MaxPoolWorkspace ws = be::max_pool2d_forward(x, y, c.p);
      check_values(yv, y, "max forward");
      if (ws.kind == be::MaxPoolWorkspace::Kind::argmax) {  // the layout the CUDA backward reads
        const std::vector<int32_t> cpu_argmax = ws.data.to_vector<int32_t>();
        BOOST_TEST(cpu_argmax == argmax, boost::test_tools::per_element());
      }
      ref_max_backward(k, planes, gyv, argmax, gxv);
      be::max_pool2d_backward(gy, ws, gx, c.p);
      check_values(gxv, gx, "max backward");

      ref_avg_forward(k, planes, xv, yv);
      be::avg_pool2d_forward(x, y, c.p);
      check_values(yv, y, "avg forward");
      ref_avg_backward(k, planes, gyv, gxv);
      be::avg_pool2d_backward(gy, gx, c.p);
      check_values(gxv, gx, "avg backward");
    }
  }
}

BOOST_AUTO_TEST_CASE(adaptive_pool_kernels_executed_match_the_cpu) {
  // The registry's adaptive families (even, uneven, global) and a growing one.
  const std::vector<std::pair<mg::Shape, mg::Shape>> cases = {
      {{1, 2, 4, 6}, {1, 2, 2, 3}}, {{1, 2, 5, 7}, {1, 2, 3, 4}}, {{2, 3, 3, 3}, {2, 3, 1, 1}},
      {{1, 1, 3, 2}, {1, 1, 5, 4}}};
  for (const auto& [xs, ys] : cases) {
    BOOST_TEST_CONTEXT(xs << " -> " << ys) {
      const Walk k{true, {}, xs[2], xs[3], ys[2], ys[3]};
      const int64_t planes = xs[0] * xs[1];
      const mg::Tensor x = random(xs), gy = random(ys);
      std::vector<double> yv(static_cast<size_t>(gy.numel())), gxv(static_cast<size_t>(x.numel()));
      ref_avg_forward(k, planes, host(x), yv);
      const mg::Tensor y = mg::empty(ys, kF64), gx = mg::empty(xs, kF64);
      be::adaptive_avg_pool2d_forward(x, y);
      check_values(yv, y, "adaptive forward");
      ref_avg_backward(k, planes, host(gy), gxv);
      be::adaptive_avg_pool2d_backward(gy, gx);
      check_values(gxv, gx, "adaptive backward");
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
