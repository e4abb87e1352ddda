// Device tests of FP8 (docs/fp8.md): the CUDA cast against the CPU's bit for
// bit, a delayed-scaling step on CUDA tensors that waits on nothing and ends
// with the CPU's scales and histories, the FP8 GEMM against the CPU's
// reference, and a linear site through the FP8 GEMMs against the CPU. Part of the
// test_cuda_device executable (whose main exits 77 without a device).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "amp/fp8_gemm.hpp"
#include "backend/fp8.hpp"
#include "backend/host_sync.hpp"
#include "device_test_support.hpp"
#include "mixgrad/amp/fp8.hpp"
#include "mixgrad/mixgrad.hpp"

using namespace device_test;

namespace {

// Magnitudes over 2^-20..2^20 with both signs, the special values and a
// strided view, in `dt`.
mg::Tensor fp8_inputs(mg::DType dt) {
  std::mt19937 gen(8);
  std::uniform_real_distribution<double> log2_mag(-20, 20);
  std::vector<double> v;
  for (int i = 0; i < 4000; ++i) v.push_back((i % 2 ? -1 : 1) * std::exp2(log2_mag(gen)));
  const std::initializer_list<double> special{INFINITY, -INFINITY, NAN,     0.0,     -0.0,   448.0,
                                              464.0,    57344.0,   61440.0, 0x1p-10, 0x1p-17};
  v.insert(v.end(), special.begin(), special.end());
  return mg::tensor(v, {static_cast<int64_t>(v.size())}, dt);
}

// The operands of one linear site: x [m, k], w [n, k] (times w_scale) and
// the upstream gradient [m, n] (times dy_scale), drawn from `seed`.
struct SiteOperands {
  int64_t m = 16, k = 32, n = 8;
  uint64_t seed = 9;
  double w_scale = 1.0, dy_scale = 1.0;
};

// A step of one linear site on `device` and the scale update; returns the
// site's input and weight, whose gradients the step computed.
std::vector<mg::Tensor> site_step(mg::Device device, mg::amp::Fp8Scaler& fp8, const SiteOperands& o = {}) {
  mg::manual_seed(o.seed);
  mg::Tensor x = mg::normal({o.m, o.k}).to(device), w = mg::F::mul(mg::normal({o.n, o.k}), o.w_scale).to(device);
  const mg::Tensor dy = mg::F::mul(mg::normal({o.m, o.n}), o.dy_scale).to(device);
  mg::autodiff::GradManager gm;
  gm.attach({x, w});
  {
    auto rec = gm.record();
    mg::Tensor y;
    {
      mg::amp::fp8_autocast region(fp8);
      y = mg::F::linear(x, w);
    }
    gm.backward(y, dy);
  }
  fp8.update();
  return {x, w};
}

// site_step, then the scale, the history and the input's gradient, read back.
std::vector<float> fp8_step(mg::Device device, mg::amp::Fp8Scaler& fp8) {
  const mg::Tensor x = site_step(device, fp8)[0];
  std::vector<float> out = fp8.scale(0).to(kCpu).to_vector<float>();
  for (float h : fp8.amax_history(0).to(kCpu).to_vector<float>()) out.push_back(h);
  for (float g : x.grad().to(kCpu).to_vector<float>()) out.push_back(g);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_device_fp8)

BOOST_AUTO_TEST_CASE(the_fp8_cast_matches_the_cpu_bit_for_bit) {
  for (mg::DType dt : {mg::DType::float32, mg::DType::bfloat16, mg::DType::float16, mg::DType::float64}) {
    for (mg::Fp8Format f : {mg::Fp8Format::e4m3, mg::Fp8Format::e5m2}) {
      BOOST_TEST_CONTEXT("dtype " << dt << ", format " << (f == mg::Fp8Format::e4m3 ? "e4m3" : "e5m2")) {
        const mg::Tensor x = fp8_inputs(dt);
        const mg::Tensor s = mg::scalar(3.0f);
        const mg::Tensor cpu = mg::F::fp8_quantize(x, s, f);
        const mg::Tensor gpu = mg::F::fp8_quantize(x.to(kGpu), s.to(kGpu), f).to(kCpu);
        BOOST_TEST(bytes_of(gpu) == bytes_of(cpu));
        const mg::Tensor m = x.narrow(0, 0, 4000).reshape({40, 100});
        const mg::Tensor rt = mg::F::fp8_round(mg::F::transpose(m, 0, 1), f);
        const mg::Tensor rt_gpu = mg::F::fp8_round(mg::F::transpose(m.to(kGpu), 0, 1), f).to(kCpu);
        BOOST_TEST(bytes_of(rt_gpu.contiguous()) == bytes_of(rt.contiguous()));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_delayed_scaling_step_on_cuda_waits_on_nothing_and_matches_the_cpu) {
  mg::amp::Fp8Scaler on_cpu({.amax_history_len = 4}), on_gpu({.amax_history_len = 4});
  fp8_step(kGpu, on_gpu);  // warm-up: the site's tensors are made
  fp8_step(kCpu, on_cpu);
  mg::cuda::synchronize(0);
  const int64_t syncs = mg::backend::host_sync_count();
  site_step(kGpu, on_gpu);
  BOOST_TEST(mg::backend::host_sync_count() == syncs);
  fp8_step(kCpu, on_cpu);
  const std::vector<float> gpu = fp8_step(kGpu, on_gpu), cpu = fp8_step(kCpu, on_cpu);
  BOOST_TEST_REQUIRE(gpu.size() == cpu.size());
  // Scales and histories: the same amaxes on both devices, exactly.
  for (size_t i = 0; i < 3 + 4 * 3; ++i) BOOST_TEST(gpu[i] == cpu[i], "entry " << i);
  // Gradients: products of the same rounded values, summed in another order.
  double err = 0, top = 0;
  for (size_t i = 15; i < gpu.size(); ++i) {
    err = std::max(err, std::abs(double(gpu[i]) - cpu[i]));
    top = std::max(top, std::abs(double(cpu[i])));
  }
  BOOST_TEST(err <= 1e-5 * top);
}

BOOST_AUTO_TEST_CASE(the_fp8_gemm_matches_the_cpu_reference) {
  namespace backend = mg::backend;
  mg::manual_seed(10);
  const int64_t m = 64, n = 48, k = 96;
  const mg::Tensor x = mg::normal({m, k}), w = mg::normal({n, k});
  const mg::Tensor sx = mg::scalar(60.0f), sw = mg::scalar(200.0f), ix = mg::scalar(1.0f / 60),
                   iw = mg::scalar(1.0f / 200);
  for (bool e5m2_weight : {false, true}) {
    for (mg::DType out_dt : {mg::DType::float32, mg::DType::bfloat16}) {
      BOOST_TEST_CONTEXT("weight " << (e5m2_weight ? "e5m2" : "e4m3") << ", out " << out_dt) {
        const mg::kernels::Fp8Params fw = e5m2_weight ? mg::kernels::kE5M2 : mg::kernels::kE4M3;
        const mg::Tensor xc = mg::empty({m, k}, mg::DType::uint8), wc = mg::empty({n, k}, mg::DType::uint8);
        backend::fp8_encode(x, xc, sx, mg::kernels::kE4M3);
        backend::fp8_encode(w, wc, sw, fw);
        const mg::Tensor xg = mg::empty({m, k}, mg::DType::uint8, kGpu), wg = mg::empty({n, k}, mg::DType::uint8, kGpu);
        backend::fp8_encode(x.to(kGpu), xg, sx.to(kGpu), mg::kernels::kE4M3);
        backend::fp8_encode(w.to(kGpu), wg, sw.to(kGpu), fw);
        BOOST_TEST(bytes_of(xg.to(kCpu)) == bytes_of(xc));
        BOOST_TEST(bytes_of(wg.to(kCpu)) == bytes_of(wc));
        const mg::Tensor cpu = mg::empty({m, n}, out_dt), gpu = mg::empty({m, n}, out_dt, kGpu);
        backend::fp8_gemm({xc, ix, mg::kernels::kE4M3}, {wc, iw, fw}, cpu);
        const mg::Tensor ixg = ix.to(kGpu), iwg = iw.to(kGpu);
        try {
          backend::fp8_gemm({xg, ixg, mg::kernels::kE4M3}, {wg, iwg, fw}, gpu);
        } catch (const mg::DeviceError& e) {  // before Ada / Hopper: no FP8 tensor cores
          BOOST_TEST_MESSAGE("fp8_gemm skipped: " << e.what());
          BOOST_TEST(std::string(e.what()).find("compute capability") != std::string::npos, e.what());
          return;
        }
        check_close(gpu, cpu, Closeness(out_dt == mg::DType::float32 ? 1e-5 : 1e-2, 0, false), "fp8_gemm");
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_linear_site_on_an_fp8_gpu_runs_three_fp8_gemms_and_matches_the_cpu) {
  // Extents that are multiples of 16: on compute capability 8.9+ the site's
  // forward, input gradient and weight gradient are cuBLASLt FP8 GEMMs,
  // waiting on nothing; the CPU emulates the same arithmetic.
  const SiteOperands operands{.m = 32, .k = 64, .n = 48, .seed = 12, .w_scale = 0.1, .dy_scale = 0.01};
  auto step = [&](mg::Device device, mg::amp::Fp8Scaler& fp8) {
    const std::vector<mg::Tensor> xw = site_step(device, fp8, operands);
    return std::vector<mg::Tensor>{xw[0].grad(), xw[1].grad()};
  };
  mg::amp::Fp8Scaler on_cpu({.amax_history_len = 4}), on_gpu({.amax_history_len = 4});
  step(kCpu, on_cpu);
  step(kGpu, on_gpu);  // warm-up, and scales from a first step on both
  mg::cuda::synchronize(0);
  const int64_t calls = mg::amp::detail::fp8_gemm_calls(), syncs = mg::backend::host_sync_count();
  const auto gpu = step(kGpu, on_gpu);
  BOOST_TEST(mg::backend::host_sync_count() == syncs);
  BOOST_TEST(mg::amp::detail::fp8_gemm_calls() - calls == (mg::cuda::fp8_gemm_available(0) ? 3 : 0));
  const auto cpu = step(kCpu, on_cpu);
  for (size_t i = 0; i < 2; ++i) check_close(gpu[i], cpu[i], Closeness(1e-5), "fp8 site gradient");
  BOOST_TEST(on_gpu.scale(0).to(kCpu).to_vector<float>() == on_cpu.scale(0).to_vector<float>());
}

BOOST_AUTO_TEST_SUITE_END()
