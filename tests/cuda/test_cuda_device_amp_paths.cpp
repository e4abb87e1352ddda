// Device tests of the CUDA paths of a mixed-precision step and of the last
// CPU-only kernels, against the CPU: the read-only found-inf check of the
// fused unscale (backend::non_finite_check), max pooling's argmax and the
// gather of its recorded (higher-order) gradient, index_put (last write
// wins, accumulate, negative and repeated indices, a bad index reported at
// the next sync), and an O2 step (float16 / bfloat16 parameters with float32
// master weights, opt.step(scaler) with and without an overflow) that makes
// no host synchronisation after warm-up. Part of test_cuda_device (exits 77
// without a device).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "backend/host_sync.hpp"
#include "backend/multi_tensor.hpp"
#include "backend/pooling.hpp"
#include "mixgrad/cuda.hpp"
#include "mixgrad/mixgrad.hpp"
#include "device_test_support.hpp"

namespace mg = mixgrad;
using namespace device_test;

namespace {

const mg::DType kLowAndSingle[] = {mg::DType::float32, mg::DType::float16, mg::DType::bfloat16};
constexpr double kInf = std::numeric_limits<double>::infinity();

double tol_of(mg::DType t) { return kSumTolerances.of(t); }

float flag_of(const mg::Tensor& found_inf) { return found_inf.to(kCpu).to_vector<float>()[0]; }

// f on CPU inputs and on their GPU copies, backward with one upstream
// gradient; outputs and floating inputs' gradients compared.
void check_op(const std::function<mg::Tensor(const std::vector<mg::Tensor>&)>& f,
              const std::vector<mg::Tensor>& inputs, double tol) {
  auto run = [&](mg::Device d, std::vector<mg::Tensor>& grads) {
    std::vector<mg::Tensor> xs;
    for (const mg::Tensor& x : inputs) xs.push_back(x.to(d).clone());
    mg::autodiff::GradManager gm;
    for (const mg::Tensor& x : xs)
      if (mg::is_floating_point(x.dtype())) gm.attach(x);
    mg::Tensor y;
    {
      auto rec = gm.record();
      y = f(xs);
      if (mg::is_floating_point(y.dtype())) {
        mg::manual_seed(7);
        const mg::Tensor dy = mg::normal(y.shape(), 0.0, 1.0).to(y.dtype());
        gm.backward(y, dy.to(d));
      }
    }
    for (const mg::Tensor& x : xs)
      if (mg::is_floating_point(x.dtype())) grads.push_back(x.grad());
    return y;
  };
  std::vector<mg::Tensor> gc, gg;
  const mg::Tensor yc = run(kCpu, gc);
  const mg::Tensor yg = run(kGpu, gg);
  check_close(yg, yc, tol, "output");
  BOOST_TEST_REQUIRE(gc.size() == gg.size());
  for (size_t i = 0; i < gc.size(); ++i) check_close(gg[i], gc[i], tol, "gradient");
}

mg::Tensor int_index(const std::vector<int64_t>& v, const mg::Shape& s) { return mg::tensor<int64_t>(v, s); }

// The same gradient list on the CPU and the GPU: contiguous tensors of two
// sizes and a transposed (strided) view; `poison` (if finite or not) is
// written at one element of the second.
struct GradList {
  std::vector<mg::Tensor> cpu, gpu;
};
GradList grad_list(mg::DType dt, double poison, bool poisoned) {
  mg::manual_seed(11);
  mg::Tensor a = mg::uniform({37, 129}, -2.0, 2.0).to(dt);
  mg::Tensor b = mg::uniform({5000}, -2.0, 2.0);
  if (poisoned) {
    std::vector<double> v = b.to_vector<double>();
    v[4321] = poison;
    b = mg::tensor(v, {5000});
  }
  b = b.to(dt);
  const mg::Tensor c = mg::uniform({30, 20}, -2.0, 2.0).to(dt);
  GradList l;
  l.cpu = {a, b, mg::F::transpose(c, 0, 1)};
  for (const mg::Tensor& t : {a, b, c}) l.gpu.push_back(t.to(kGpu));
  l.gpu[2] = mg::F::transpose(l.gpu[2], 0, 1);
  return l;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_device_amp_paths)

// ---- the found-inf check of step(scaler) -------------------------------------

BOOST_AUTO_TEST_CASE(non_finite_check_flags_as_the_cpu_and_writes_nothing_without_a_host_sync) {
  for (mg::DType dt : {mg::DType::float32, mg::DType::float16, mg::DType::bfloat16, mg::DType::float64}) {
    struct Case {
      const char* name;
      double poison;
      bool poisoned;
      double inv_scale;
    };
    // overflow: a finite gradient whose product with a finite inv_scale
    // leaves the compute type (float, or double for float64).
    const bool f64 = dt == mg::DType::float64;
    const double big = f64 ? 1e300 : 1e36, large = f64 ? 1e10 : 1e4;
    for (const Case c : {Case{"clean", 0.0, false, 1.0 / 1024}, Case{"inf", kInf, true, 1.0 / 1024},
                         Case{"nan", std::nan(""), true, 1.0 / 1024}, Case{"overflow", large, true, big},
                         Case{"inf factor", 0.0, false, kInf}}) {
      for (mg::DType scale_dt : {mg::DType::float64, mg::DType::float32}) {
        BOOST_TEST_CONTEXT("dtype " << dt << ", " << c.name << ", inv_scale " << scale_dt) {
          const GradList l = grad_list(dt, c.poison, c.poisoned);
          std::vector<std::vector<uint8_t>> before;
          for (const mg::Tensor& t : l.gpu) before.push_back(bytes_of(t));
          const mg::Tensor flag_cpu = mg::zeros(mg::Shape{}, mg::DType::float32);
          const mg::Tensor flag_gpu = flag_cpu.to(kGpu);
          const mg::Tensor inv_cpu = mg::scalar(c.inv_scale, scale_dt);
          const mg::Tensor inv_gpu = inv_cpu.to(kGpu);
          mg::backend::non_finite_check(l.cpu, flag_cpu, inv_cpu);
          mg::cuda::synchronize(0);
          const int64_t syncs = mg::backend::host_sync_count();
          mg::backend::non_finite_check(l.gpu, flag_gpu, inv_gpu);
          BOOST_TEST(mg::backend::host_sync_count() == syncs);
          BOOST_TEST(flag_of(flag_gpu) == flag_of(flag_cpu));
          BOOST_TEST(flag_of(flag_gpu) == (c.poisoned || std::isinf(c.inv_scale) ? 1.0f : 0.0f));
          for (size_t i = 0; i < l.gpu.size(); ++i)
            BOOST_TEST(bytes_of(l.gpu[i]) == before[i], "tensor " << i << " was written");
        }
      }
    }
  }
}

// A flag already set stays set: the check never resets it.
BOOST_AUTO_TEST_CASE(non_finite_check_never_clears_the_flag) {
  const GradList l = grad_list(mg::DType::float16, 0.0, false);
  const mg::Tensor flag = mg::ones(mg::Shape{}, mg::DType::float32).to(kGpu);
  mg::backend::non_finite_check(l.gpu, flag, mg::scalar(1.0, mg::DType::float64).to(kGpu));
  BOOST_TEST(flag_of(flag) == 1.0f);
}

// ---- max pooling's argmax and its gather --------------------------------------

BOOST_AUTO_TEST_CASE(max_pool_argmax_and_gather_match_the_cpu_bit_for_bit_with_ties_and_nan) {
  const double nan = std::nan("");
  // Ties, NaN after a larger value, -inf windows, +-0: the tie rule decides.
  const std::vector<double> plane = {2.0,  2.0,  -1.0, 1.0,  1.0,  0.5,  nan,  3.0,  nan,  1.0,
                                     -kInf, -kInf, 0.0, 0.0,  -2.0, -kInf, -kInf, 0.0,  -0.0, -2.0};
  const mg::backend::Pool2dParams geometries[] = {
      {{2, 2}, {2, 2}, {0, 0}}, {{3, 3}, {1, 1}, {1, 1}}, {{2, 3}, {1, 2}, {1, 1}}, {{4, 5}, {1, 1}, {0, 0}}};
  for (mg::DType dt : {mg::DType::float32, mg::DType::float16, mg::DType::bfloat16, mg::DType::float64}) {
    for (const auto& p : geometries) {
      BOOST_TEST_CONTEXT("dtype " << dt << " kernel " << p.kernel.h << "x" << p.kernel.w) {
        std::vector<double> v = plane;
        for (double e : plane) v.push_back(-e);
        mg::manual_seed(3);
        for (double e : mg::uniform({2 * 4 * 5}, -1.0, 1.0).to(dt).to_vector<double>()) v.push_back(e);
        const mg::Tensor x = mg::tensor(v, {1, 4, 4, 5}, dt);
        const int64_t oh = (4 + 2 * p.padding.h - p.kernel.h) / p.stride.h + 1;
        const int64_t ow = (5 + 2 * p.padding.w - p.kernel.w) / p.stride.w + 1;
        const mg::Tensor yc = mg::empty({1, 4, oh, ow}, dt), yg = mg::empty({1, 4, oh, ow}, dt, kGpu);
        const mg::backend::MaxPoolWorkspace wc = mg::backend::max_pool2d_argmax(x, yc, p);
        const mg::backend::MaxPoolWorkspace wg = mg::backend::max_pool2d_argmax(x.to(kGpu), yg, p);
        BOOST_TEST((wg.kind == mg::backend::MaxPoolWorkspace::Kind::argmax));
        BOOST_TEST(wg.data.to(kCpu).to_vector<int32_t>() == wc.data.to_vector<int32_t>(),
                   boost::test_tools::per_element());
        BOOST_TEST(bytes_of(yg) == bytes_of(yc));
        const mg::Tensor gx = mg::uniform({1, 4, 4, 5}, -1.0, 1.0).to(dt);
        const mg::Tensor gyc = mg::empty({1, 4, oh, ow}, dt), gyg = mg::empty({1, 4, oh, ow}, dt, kGpu);
        mg::backend::max_pool2d_gather(gx, wc, gyc);
        mg::backend::max_pool2d_gather(gx.to(kGpu), wg, gyg);
        BOOST_TEST(bytes_of(gyg) == bytes_of(gyc));
      }
    }
  }
}

// The recorded gradient of max pooling (create_graph) differentiated again:
// with L = sum(y^2) / 2 the first gradient routes y itself, so the second
// backward runs the argmax gather on the device.
BOOST_AUTO_TEST_CASE(a_second_order_max_pool_gradient_matches_the_cpu) {
  for (mg::DType dt : kLowAndSingle) {
    BOOST_TEST_CONTEXT("dtype " << dt) {
      mg::manual_seed(5);
      const mg::Tensor x0 = mg::uniform({2, 3, 6, 7}, -1.0, 1.0).to(dt);
      const mg::Tensor v0 = mg::uniform({2, 3, 6, 7}, -1.0, 1.0).to(dt);
      auto run = [&](mg::Device d) {
        const mg::Tensor x = x0.to(d).clone(), v = v0.to(d);
        mg::autodiff::GradManager gm;
        gm.attach(x);
        {
          auto rec = gm.record();
          const mg::Tensor y = mg::F::max_pool2d(x, {.kernel_size = 3, .stride = 2, .padding = 1});
          gm.backward(mg::F::mul(mg::F::sum(mg::F::mul(y, y)), mg::scalar(0.5, dt).to(d)), {},
                      {.create_graph = true});
          const mg::Tensor g = x.grad();
          x.set_grad({});
          gm.backward(mg::F::sum(mg::F::mul(g, v)));
        }
        return x.grad();
      };
      check_close(run(kGpu), run(kCpu), tol_of(dt), "second-order gradient");
    }
  }
}

// ---- index_put ----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(index_put_matches_the_cpu_with_repeated_and_negative_indices) {
  for (mg::DType dt : kLowAndSingle) {
    for (bool accumulate : {false, true}) {
      BOOST_TEST_CONTEXT("dtype " << dt << (accumulate ? " accumulate" : " overwrite")) {
        // Overwrite: the last entry naming a row wins, so the result is the
        // CPU's exactly (tol 0); accumulate adds in float32 with atomics.
        const double tol = accumulate ? tol_of(dt) : 0.0;
        const mg::Tensor x = mg::uniform({6, 4}, -1.0, 1.0).to(dt);
        const mg::Tensor rows = int_index({0, -1, 3, 0, 5, 3, -6, 2}, {8});
        const mg::Tensor values = mg::uniform({8, 4}, -1.0, 1.0).to(dt);
        check_op(
            [&](const auto& xs) {
              return mg::F::index_put(xs[0], {rows.to(xs[0].device())}, xs[1], {.accumulate = accumulate});
            },
            {x, values}, tol);
        // Two index tensors broadcast together, values broadcast over them.
        const mg::Tensor y = mg::uniform({3, 4, 2}, -1.0, 1.0).to(dt);
        const mg::Tensor i0 = int_index({0, -1, 2, 0, 1}, {5}), i1 = int_index({3, 0, -4, 3, 1}, {5});
        const mg::Tensor row = mg::uniform({2}, -1.0, 1.0).to(dt);
        check_op(
            [&](const auto& xs) {
              return mg::F::index_put(xs[0], {i0.to(xs[0].device()), i1.to(xs[0].device())}, xs[1],
                                      {.accumulate = accumulate});
            },
            {y, row}, tol);
      }
    }
  }
  // Integers: exact either way.
  const mg::Tensor xi = int_index({1, 2, 3, 4, 5, 6}, {3, 2});
  const mg::Tensor vi = int_index({10, 20, 30, 40, 50, 60}, {3, 2});
  const mg::Tensor ri = int_index({2, 0, 2}, {3});
  for (bool accumulate : {false, true}) {
    const mg::Tensor yc = mg::F::index_put(xi, {ri}, vi, {.accumulate = accumulate});
    const mg::Tensor yg = mg::F::index_put(xi.to(kGpu), {ri.to(kGpu)}, vi.to(kGpu), {.accumulate = accumulate});
    BOOST_TEST(yg.to(kCpu).to_vector<int64_t>() == yc.to_vector<int64_t>(), boost::test_tools::per_element());
  }
}

// Many entries naming few rows: whichever order the threads run in, each
// row keeps the last entry's values, every run.
BOOST_AUTO_TEST_CASE(index_put_last_write_wins_deterministically) {
  std::vector<int64_t> r;
  for (int64_t i = 0; i < 20000; ++i) r.push_back((i * 7919) % 13);
  const mg::Tensor rows = int_index(r, {20000});
  const mg::Tensor x = mg::zeros({13, 33});
  const mg::Tensor values = mg::uniform({20000, 33}, -1.0, 1.0);
  const mg::Tensor want = mg::F::index_put(x, {rows}, values);
  for (int run = 0; run < 3; ++run) {
    const mg::Tensor got = mg::F::index_put(x.to(kGpu), {rows.to(kGpu)}, values.to(kGpu));
    BOOST_TEST(bytes_of(got) == bytes_of(want), "run " << run);
  }
}

BOOST_AUTO_TEST_CASE(an_out_of_range_index_put_index_is_a_value_error_at_the_next_sync) {
  const mg::Tensor x = mg::zeros({3, 4}).to(kGpu);
  const mg::Tensor v = mg::ones({2, 4}).to(kGpu);
  BOOST_CHECK_THROW(
      {
        const mg::Tensor y = mg::F::index_put(x, {int_index({1, 3}, {2}).to(kGpu)}, v);
        (void)y.to(kCpu);
      },
      mg::ValueError);
  BOOST_CHECK_THROW(
      {
        const mg::Tensor y = mg::F::index_put(x, {int_index({1, -4}, {2}).to(kGpu)}, v, {.accumulate = true});
        mg::cuda::synchronize(0);
      },
      mg::ValueError);
  // Later work on the device is unaffected.
  const mg::Tensor ok = mg::F::index_put(x, {int_index({2, 0}, {2}).to(kGpu)}, v);
  check_close(ok, mg::F::index_put(mg::zeros({3, 4}), {int_index({2, 0}, {2})}, mg::ones({2, 4})), 0, "after");
}

// ---- an O2 step ---------------------------------------------------------------

namespace {

// A linear model in `dtype` on `device`, the same values on every device.
struct O2Model {
  mg::Tensor w, b, x, y;
  mg::autodiff::GradManager gm;
  O2Model(mg::DType dtype, mg::Device device) {
    mg::manual_seed(9);
    w = mg::uniform({8, 16}, -0.5, 0.5).to(dtype).to(device);
    b = mg::uniform({8}, -0.5, 0.5).to(dtype).to(device);
    x = mg::uniform({32, 16}, -1.0, 1.0).to(dtype).to(device);
    y = mg::uniform({32, 8}, -1.0, 1.0).to(dtype).to(device);
    gm.attach({w, b});
  }
  // `bad` puts an inf into b's gradient only.
  mg::Tensor loss(bool bad) const {
    mg::Tensor l = mg::F::mse_loss(mg::F::linear(x, w, b), y);
    if (bad) l = l + mg::F::sum(b * mg::full({8}, kInf, b.dtype()).to(b.device()));
    return l;
  }
};

using Factory = std::function<std::unique_ptr<mg::optim::Optimizer>(std::vector<mg::Tensor>, bool master)>;

std::vector<std::pair<const char*, Factory>> optimizers() {
  return {
      {"SGD",
       [](std::vector<mg::Tensor> p, bool m) {
         return std::make_unique<mg::optim::SGD>(
             std::move(p), mg::optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .master_weights = m});
       }},
      {"Adam",
       [](std::vector<mg::Tensor> p, bool m) {
         return std::make_unique<mg::optim::Adam>(std::move(p),
                                                  mg::optim::AdamOptions{.lr = 0.01, .master_weights = m});
       }},
  };
}

void fused_step(O2Model& m, mg::optim::Optimizer& opt, mg::amp::GradScaler& scaler, bool bad) {
  {
    auto rec = m.gm.record();
    scaler.backward(m.gm, m.loss(bad), mg::Tensor(),
        {.unscale_grad = false, .update_scale = mg::amp::UpdateScale::never});
  }
  opt.step(scaler);
  scaler.update();
  opt.clear_grad();
}

}  // namespace

// Master weights and the unscale fused into the update, on the device: the
// run follows the CPU's (an overflowing step skipped on both, the scale
// backed off), the 16-bit parameter is always its master's rounding, and the
// step counts and scale agree exactly.
BOOST_AUTO_TEST_CASE(an_o2_step_with_master_weights_and_step_scaler_follows_the_cpu) {
  for (mg::DType dt : kLowAndSingle) {
    for (const auto& entry : optimizers()) {
      const char* name = entry.first;
      const Factory& make = entry.second;
      BOOST_TEST_CONTEXT(name << ", " << dt) {
        const bool master = dt != mg::DType::float32;
        O2Model mc(dt, kCpu), mgpu(dt, kGpu);
        auto oc = make({mc.w, mc.b}, master);
        auto og = make({mgpu.w, mgpu.b}, master);
        mg::amp::GradScaler sc({.init_scale = 1024.0, .growth_interval = 2});
        mg::amp::GradScaler sg({.init_scale = 1024.0, .growth_interval = 2});
        for (int step = 0; step < 6; ++step) {
          const bool bad = step == 3;
          const std::vector<uint8_t> w_before = bytes_of(mgpu.w);
          fused_step(mc, *oc, sc, bad);
          fused_step(mgpu, *og, sg, bad);
          if (bad) BOOST_TEST(bytes_of(mgpu.w) == w_before, "step " << step << " was not skipped");
          BOOST_TEST(sg.scale_factor() == sc.scale_factor(), "step " << step);
        }
        BOOST_TEST(og->step_count(0) == oc->step_count(0));
        BOOST_TEST(og->step_count(0) == 5);
        check_close(mgpu.w, mc.w, 4 * tol_of(dt), "w");
        check_close(mgpu.b, mc.b, 4 * tol_of(dt), "b");
        if (master) {
          BOOST_TEST_REQUIRE(og->master_weight(0).defined());
          BOOST_TEST(og->master_weight(0).device() == kGpu);
          check_close(og->master_weight(0), oc->master_weight(0), 4 * tol_of(dt), "master");
          BOOST_TEST(bytes_of(mgpu.w) == bytes_of(og->master_weight(0).to(dt)), "w is not its master's rounding");
        }
      }
    }
  }
}

// After warm-up, the fused O2 step (scaled backward, the read-only check,
// the master-weight update reading inv_scale and found_inf on the device,
// the scale update) makes no host synchronisation, with or without an
// overflow.
BOOST_AUTO_TEST_CASE(a_fused_o2_step_after_warm_up_makes_no_host_synchronisation) {
  for (mg::DType dt : {mg::DType::float16, mg::DType::bfloat16}) {
    BOOST_TEST_CONTEXT("dtype " << dt) {
      O2Model m(dt, kGpu);
      mg::optim::Adam opt({m.w, m.b}, {.lr = 0.01, .master_weights = true});
      mg::amp::GradScaler scaler({.init_scale = 1024.0});
      fused_step(m, opt, scaler, false);  // warm-up: handles, workspaces, state, master copies
      fused_step(m, opt, scaler, false);
      mg::cuda::synchronize(0);
      const int64_t before = mg::backend::host_sync_count();
      fused_step(m, opt, scaler, false);
      fused_step(m, opt, scaler, true);
      BOOST_TEST(mg::backend::host_sync_count() == before);
      BOOST_TEST(opt.step_count(0) == 3);  // a host value: now it waits
      BOOST_TEST(mg::backend::host_sync_count() > before);
    }
  }
}

// PyTorch's recipe (gm.backward(scaler.scale(loss)); scaler.step(opt);
// scaler.update()) keeps the step on the device too: the scale is read
// there, the gradients' marks are host bookkeeping, and scaler.step's
// unscale sets the flag on the device.
BOOST_AUTO_TEST_CASE(the_pytorch_recipe_after_warm_up_makes_no_host_synchronisation) {
  for (bool fused : {false, true}) {
    BOOST_TEST_CONTEXT("fused unscale " << fused) {
      O2Model m(mg::DType::bfloat16, kGpu);
      mg::optim::Adam opt({m.w, m.b}, {.lr = 0.01, .master_weights = true, .step_supports_amp_scaling = fused});
      mg::amp::GradScaler scaler({.init_scale = 1024.0});
      const auto step = [&](bool bad) {
        {
          auto rec = m.gm.record();
          m.gm.backward(scaler.scale(m.loss(bad)));
        }
        scaler.step(opt);
        scaler.update();
        opt.clear_grad();
      };
      step(false);  // warm-up
      step(false);
      mg::cuda::synchronize(0);
      const int64_t before = mg::backend::host_sync_count();
      step(false);
      step(true);
      BOOST_TEST(mg::backend::host_sync_count() == before);
      BOOST_TEST(opt.step_count(0) == 3);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
