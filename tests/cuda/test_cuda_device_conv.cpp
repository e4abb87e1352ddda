// Device tests of the CUDA convolution (cuDNN) and pooling (own kernels)
// families: every op of backend/conv.hpp and backend/pooling.hpp, forward and
// all gradients, in float32, float16, bfloat16 and float64, against the CPU,
// over the op registry's geometries (tests/ops/cases_nn.cpp). Part of the
// test_cuda_device executable, whose main exits 77 without a device.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "backend/host_sync.hpp"
#include "device_test_support.hpp"
#include "mixgrad/mixgrad.hpp"

using namespace device_test;

namespace {

// Sums of a few dozen products; cuDNN picks its own summation order.
constexpr Tolerances kConvTolerances{4e-3, 2e-2, 1e-5, 1e-12};

// Runs `run` on uniform inputs of `shapes` in every floating dtype on both
// devices, backpropagates one uniform upstream gradient, and compares the
// output and every input gradient (relative to the CPU's largest magnitude,
// at least 1).
void compare(const std::string& name, const std::vector<mg::Shape>& shapes, const TensorFn& run) {
  for (mg::DType dt : kFloatingDTypes) {
    BOOST_TEST_CONTEXT(name << " in " << dt) {
      std::vector<mg::Tensor> inputs;
      for (const mg::Shape& s : shapes) inputs.push_back(mg::uniform(s, -1.0, 1.0).to(dt));
      check_against_cpu(run, inputs, Closeness(kConvTolerances.of(dt), 1.0),
                        [](const mg::Tensor& y) { return mg::uniform(y.shape(), -1.0, 1.0).to(y.dtype()); });
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_device_conv)

BOOST_AUTO_TEST_CASE(conv2d_matches_the_cpu_in_every_dtype_and_geometry) {
  struct C {
    std::string name;
    mg::Shape x, w;
    bool bias;
    mg::F::Conv2dOptions o;
  };
  const std::vector<C> cases = {
      {"plain", {2, 3, 5, 5}, {4, 3, 3, 3}, true, {}},
      {"padding", {1, 2, 4, 4}, {3, 2, 3, 3}, true, {.padding = 1}},
      {"stride_padding_non_square", {1, 2, 6, 5}, {3, 2, 3, 2}, true, {.stride = {2, 1}, .padding = {1, 0}}},
      {"dilation", {1, 2, 6, 6}, {2, 2, 2, 3}, false, {.padding = 1, .dilation = {2, 1}}},
      {"groups", {2, 4, 4, 4}, {6, 2, 3, 3}, true, {.padding = 1, .groups = 2}},
      {"depthwise", {1, 3, 4, 4}, {3, 1, 3, 3}, false, {.stride = 2, .padding = 1, .groups = 3}},
      {"1x1", {2, 3, 3, 3}, {2, 3, 1, 1}, false, {}},
      {"larger", {4, 16, 16, 16}, {32, 16, 3, 3}, true, {.padding = 1}},
  };
  for (const C& c : cases) {
    std::vector<mg::Shape> shapes{c.x, c.w};
    if (c.bias) shapes.push_back({c.w[0]});
    compare("conv2d_" + c.name, shapes, [c](const std::vector<mg::Tensor>& in) {
      return mg::F::conv2d(in[0], in[1], c.bias ? in[2] : mg::Tensor(), c.o);
    });
  }
}

BOOST_AUTO_TEST_CASE(conv1d_and_conv_transpose2d_match_the_cpu) {
  compare("conv1d", {{2, 3, 7}, {4, 3, 3}, {4}},
          [](const std::vector<mg::Tensor>& in) { return mg::F::conv1d(in[0], in[1], in[2], {}); });
  compare("conv1d_groups_dilation", {{2, 4, 9}, {6, 2, 3}},
          [](const std::vector<mg::Tensor>& in) {
            return mg::F::conv1d(in[0], in[1], mg::Tensor(), {.stride = 2, .padding = 2, .dilation = 2, .groups = 2});
          });
  compare("conv_transpose2d", {{2, 3, 3, 3}, {3, 2, 3, 3}, {2}},
          [](const std::vector<mg::Tensor>& in) { return mg::F::conv_transpose2d(in[0], in[1], in[2], {}); });
  compare("conv_transpose2d_stride_output_padding", {{1, 2, 3, 4}, {2, 3, 3, 3}},
          [](const std::vector<mg::Tensor>& in) {
            return mg::F::conv_transpose2d(in[0], in[1], mg::Tensor(),
                                           {.stride = 2, .padding = 1, .output_padding = 1});
          });
  compare("conv_transpose2d_groups", {{2, 4, 3, 3}, {4, 1, 3, 3}, {2}}, [](const std::vector<mg::Tensor>& in) {
    return mg::F::conv_transpose2d(in[0], in[1], in[2], {.stride = 2, .padding = 1, .groups = 2});
  });
}

BOOST_AUTO_TEST_CASE(pools_match_the_cpu_in_every_dtype) {
  using V = std::vector<mg::Tensor>;
  compare("max_pool2d", {{2, 3, 4, 4}}, [](const V& x) { return mg::F::max_pool2d(x[0], {.kernel_size = 2}); });
  compare("max_pool2d_overlapping", {{1, 2, 5, 5}},
          [](const V& x) { return mg::F::max_pool2d(x[0], {.kernel_size = 3, .stride = 1}); });
  compare("max_pool2d_stride_padding", {{1, 2, 5, 6}}, [](const V& x) {
    return mg::F::max_pool2d(x[0], {.kernel_size = {3, 2}, .stride = {2, 1}, .padding = {1, 1}});
  });
  compare("avg_pool2d_padding_excluded", {{1, 2, 5, 5}},
          [](const V& x) { return mg::F::avg_pool2d(x[0], {.kernel_size = 3, .stride = 2, .padding = 1}); });
  compare("avg_pool2d_non_square", {{1, 2, 4, 6}}, [](const V& x) {
    return mg::F::avg_pool2d(x[0], {.kernel_size = {2, 3}, .stride = {1, 2}, .padding = {1, 0}});
  });
  compare("adaptive_even", {{1, 2, 4, 6}}, [](const V& x) { return mg::F::adaptive_avg_pool2d(x[0], {2, 3}); });
  compare("adaptive_uneven", {{1, 2, 5, 7}}, [](const V& x) { return mg::F::adaptive_avg_pool2d(x[0], {3, 4}); });
  compare("adaptive_global", {{2, 3, 3, 3}}, [](const V& x) { return mg::F::adaptive_avg_pool2d(x[0], {1, 1}); });
  compare("max_pool1d", {{1, 2, 7}},
          [](const V& x) { return mg::F::max_pool1d(x[0], {.kernel_size = 3, .stride = 2, .padding = 1}); });
  compare("avg_pool1d", {{1, 3, 7}},
          [](const V& x) { return mg::F::avg_pool1d(x[0], {.kernel_size = 3, .stride = 2, .padding = 1}); });
  compare("max_pool3d", {{2, 1, 3, 5, 4}}, [](const V& x) {
    return mg::F::max_pool3d(x[0], {.kernel_size = {3, 3, 2}, .stride = {2, 1, 2}, .padding = {1, 1, 0}});
  });
  compare("avg_pool3d", {{1, 2, 3, 5, 5}}, [](const V& x) {
    return mg::F::avg_pool3d(x[0], {.kernel_size = {2, 3, 3}, .stride = {1, 2, 2}, .padding = {1, 1, 1}});
  });
}

// A conv + pool step after warm-up (cached descriptors, algorithms and
// handles) makes no host synchronisation.
BOOST_AUTO_TEST_CASE(a_conv_step_on_the_device_does_not_wait_for_it) {
  const mg::Tensor x = mg::uniform({8, 3, 16, 16}, -1.0, 1.0).to(kGpu);
  const mg::Tensor w = mg::uniform({8, 3, 3, 3}, -0.3, 0.3).to(kGpu);
  const mg::Tensor b = mg::zeros({8}, mg::DType::float32, kGpu);
  auto step = [&] {
    mg::autodiff::GradManager gm;
    gm.attach(w);
    gm.attach(b);
    auto recording = gm.record();
    const mg::Tensor h = mg::F::max_pool2d(mg::F::relu(mg::F::conv2d(x, w, b, {.padding = 1})), {.kernel_size = 2});
    const mg::Tensor loss = mg::F::mean(mg::F::adaptive_avg_pool2d(h, {1, 1}));
    gm.backward(loss);
    return loss;
  };
  const mg::Tensor loss = warm_step_without_host_sync(step);
  BOOST_TEST(std::isfinite(loss.to(kCpu).to_vector<float>()[0]));
}

// An empty input (no input channels; or no rows, which the padding still
// turns into outputs) convolves to zeros plus the bias. cuDNN refuses
// descriptors with an extent of 0, so the device must not build any.
BOOST_AUTO_TEST_CASE(a_convolution_of_an_empty_input_is_the_bias_as_on_the_cpu) {
  struct C {
    std::string name;
    mg::Shape x, w;
    mg::F::Conv2dOptions o;
  };
  const std::vector<C> cases = {
      {"no input channels", {2, 0, 4, 4}, {3, 0, 3, 3}, {.padding = 1}},
      {"no input rows, padded", {1, 2, 0, 3}, {3, 2, 1, 1}, {.padding = 1}},
  };
  for (const C& c : cases) {
    for (mg::DType dt : kFloatingDTypes) {
      BOOST_TEST_CONTEXT(c.name << " in " << dt) {
        const std::vector<mg::Tensor> inputs = {mg::uniform(c.x, -1.0, 1.0).to(dt), mg::uniform(c.w, -1.0, 1.0).to(dt),
                                                mg::uniform({c.w[0]}, -1.0, 1.0).to(dt)};
        const mg::F::Conv2dOptions o = c.o;
        check_against_cpu([o](const auto& v) { return mg::F::conv2d(v[0], v[1], v[2], o); }, inputs,
                          kSumTolerances.of(dt), seeded_normal(5));
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
