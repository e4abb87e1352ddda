// Device tests of the CUDA convolution (cuDNN) and pooling (own kernels)
// families: every op of backend/conv.hpp and backend/pooling.hpp, forward and
// all gradients, in float32, float16, bfloat16 and float64, against the CPU,
// over the op registry's geometries (tests/ops/cases_nn.cpp). Part of the
// test_cuda_device executable, whose main exits 77 without a device.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "backend/host_sync.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;

namespace {

const mg::Device kGpu = mg::Device::cuda(0);
const mg::Device kCpu = mg::Device::cpu();

// Per-dtype tolerance relative to the largest magnitude of the CPU result
// (sums of a few dozen products; cuDNN picks its own summation order).
double tol_of(mg::DType t) {
  switch (t) {
    case mg::DType::float16: return 4e-3;
    case mg::DType::bfloat16: return 2e-2;
    case mg::DType::float32: return 1e-5;
    default: return 1e-12;
  }
}

void check_close(const mg::Tensor& gpu, const mg::Tensor& cpu, double tol, const std::string& what) {
  BOOST_TEST_REQUIRE(gpu.defined(), what);
  BOOST_TEST_REQUIRE(cpu.defined(), what);
  BOOST_TEST(gpu.device() == kGpu, what);
  BOOST_TEST_REQUIRE(gpu.shape() == cpu.shape(), what);
  BOOST_TEST(gpu.dtype() == cpu.dtype(), what);
  const auto a = gpu.to(kCpu).to_vector<double>();
  const auto b = cpu.to_vector<double>();
  double scale = 1;
  for (double v : b) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < a.size(); ++i)
    BOOST_TEST(std::abs(a[i] - b[i]) <= tol * scale, what << " element " << i << ": " << a[i] << " vs " << b[i]);
}

using Run = std::function<mg::Tensor(const std::vector<mg::Tensor>&)>;

// Runs `run` on CPU copies and CUDA copies of the same inputs (rounded to dt
// first, so both see the same values), then the gradients of sum(y * r) for
// a random r, and compares output and every input gradient.
void compare(const std::string& name, const std::vector<mg::Shape>& shapes, const Run& run) {
  for (mg::DType dt : {mg::DType::float32, mg::DType::float16, mg::DType::bfloat16, mg::DType::float64}) {
    BOOST_TEST_CONTEXT(name << " in " << dt) {
      std::vector<mg::Tensor> cpu, gpu;
      for (const mg::Shape& s : shapes) {
        cpu.push_back(mg::uniform(s, -1.0, 1.0).to(dt));
        gpu.push_back(cpu.back().to(kGpu));
      }
      auto pass = [&](const std::vector<mg::Tensor>& in, std::vector<mg::Tensor>& grads, const mg::Tensor& r_cpu) {
        mg::autodiff::GradManager gm;
        for (const mg::Tensor& t : in) gm.attach(t);
        mg::Tensor y;
        {
          auto recording = gm.record();
          y = run(in);
          gm.backward(mg::F::sum(mg::F::mul(y, r_cpu.to(y.device()))));
        }
        for (const mg::Tensor& t : in) grads.push_back(t.grad());
        return y;
      };
      std::vector<mg::Tensor> g_cpu, g_gpu;
      mg::Tensor r;
      {
        const mg::Tensor probe = run(cpu);
        r = mg::uniform(probe.shape(), -1.0, 1.0).to(dt);
      }
      const mg::Tensor y_cpu = pass(cpu, g_cpu, r);
      const mg::Tensor y_gpu = pass(gpu, g_gpu, r);
      const double tol = tol_of(dt);
      check_close(y_gpu, y_cpu, tol, "output");
      for (size_t i = 0; i < g_cpu.size(); ++i) check_close(g_gpu[i], g_cpu[i], tol, "gradient " + std::to_string(i));
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
  step();
  step();
  const int64_t before = mg::backend::host_sync_count();
  const mg::Tensor loss = step();
  BOOST_TEST(mg::backend::host_sync_count() == before);
  BOOST_TEST(std::isfinite(loss.to(kCpu).to_vector<float>()[0]));
}

BOOST_AUTO_TEST_SUITE_END()
