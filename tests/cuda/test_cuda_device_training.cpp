// Device tests of the CUDA training families: the GradScaler's multi-tensor
// check-and-unscale, the grad norm and clip, the scale update and the scaled
// dy, the optimizer updates, dropout, and an AMP training step of a small
// model. Each GPU result is compared with the CPU's. Linked into
// test_cuda_device, whose main exits 77 without a device.
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/copy.hpp"
#include "backend/dropout.hpp"
#include "backend/host_sync.hpp"
#include "backend/loss_scale.hpp"
#include "backend/multi_tensor.hpp"
#include "backend/optim.hpp"
#include "backend/pending_checks.hpp"
#include "device_test_support.hpp"
#include "mixgrad/mixgrad.hpp"

using namespace device_test;

namespace {

// A gradient list of every floating dtype, tiny to several chunks, and a
// strided view, as CPU tensors.
std::vector<mg::Tensor> grad_list() {
  std::vector<mg::Tensor> g;
  g.push_back(mg::normal({3}, 0.0, 10.0));
  g.push_back(mg::normal({70000}, 0.0, 10.0).to(mg::DType::float16));
  g.push_back(mg::normal({257, 3}, 0.0, 10.0).to(mg::DType::bfloat16));
  g.push_back(mg::normal({200001}, 0.0, 1.0, mg::DType::float64));
  for (int i = 0; i < 50; ++i) g.push_back(mg::normal({i + 1}, 0.0, 1.0));
  return g;
}

// f on CPU inputs and on their GPU copies, backward with one seeded upstream
// gradient; outputs and floating inputs' gradients compared within `tol`
// (relative to the largest magnitude of each CPU result).
void check_op(const TensorFn& f, const std::vector<mg::Tensor>& inputs, double tol) {
  check_against_cpu(f, inputs, tol, seeded_normal(99));
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_training_families)

BOOST_AUTO_TEST_CASE(check_and_unscale_matches_the_cpu_bit_for_bit) {
  for (bool with_inf : {false, true}) {
    BOOST_TEST_CONTEXT("with inf " << with_inf) {
      std::vector<mg::Tensor> cpu = grad_list();
      // a strided view: every other column of a [64, 10] matrix
      const mg::Tensor base = mg::normal({64, 10}, 0.0, 3.0);
      cpu.push_back(base.narrow(1, 0, 5));
      if (with_inf) mg::backend::fill(cpu[2].narrow(0, 100, 1), std::numeric_limits<double>::infinity());
      std::vector<mg::Tensor> gpu = to_gpu(cpu);
      const mg::Tensor gpu_base = base.to(kGpu);
      gpu.back() = gpu_base.narrow(1, 0, 5);
      const mg::Tensor inv_cpu = mg::full({1}, 1.0 / 1024.0);
      const mg::Tensor flag_cpu = mg::zeros({1});
      const mg::Tensor flag_gpu = mg::zeros({1}, mg::DType::float32, kGpu);
      mg::backend::non_finite_check_and_unscale(cpu, flag_cpu, inv_cpu);
      mg::backend::non_finite_check_and_unscale(gpu, flag_gpu, inv_cpu.to(kGpu));
      BOOST_TEST(scalar(flag_gpu) == (with_inf ? 1.0 : 0.0));
      BOOST_TEST(scalar(flag_cpu) == scalar(flag_gpu));
      for (size_t i = 0; i + 1 < cpu.size(); ++i) BOOST_TEST(bytes_of(gpu[i]) == bytes_of(cpu[i]), "tensor " << i);
      BOOST_TEST(bytes_of(gpu_base) == bytes_of(base));  // the view's other columns untouched, its own unscaled
    }
  }
}

BOOST_AUTO_TEST_CASE(a_non_finite_inv_scale_flags_the_step_and_touches_nothing) {
  const std::vector<mg::Tensor> cpu = grad_list();
  const std::vector<mg::Tensor> gpu = to_gpu(cpu);
  const mg::Tensor flag = mg::zeros({1}, mg::DType::float32, kGpu);
  // finite in double, not in float: the float grads would be multiplied by inf
  mg::backend::non_finite_check_and_unscale(gpu, flag, mg::full({1}, 1e300, mg::DType::float64, kGpu));
  BOOST_TEST(scalar(flag) == 1.0);
  for (size_t i = 0; i < cpu.size(); ++i) BOOST_TEST(bytes_of(gpu[i]) == bytes_of(cpu[i]), "tensor " << i);
}

BOOST_AUTO_TEST_CASE(grad_norms_match_the_cpu) {
  const std::vector<mg::Tensor> cpu = grad_list();
  const std::vector<mg::Tensor> gpu = to_gpu(cpu);
  for (double p : {1.0, 2.0, 3.0, std::numeric_limits<double>::infinity()}) {
    BOOST_TEST_CONTEXT("p " << p) {
      const double want = scalar(mg::backend::grad_norm(cpu, p));
      const mg::Tensor got = mg::backend::grad_norm(gpu, p);
      BOOST_TEST(got.device() == kGpu);
      // sums of ~500k terms in another order: a few 1e-13 apart in double
      BOOST_TEST(relatively_close(scalar(got), want, 1e-10), scalar(got) << " vs " << want);
    }
  }
  // Sums of squares outside double's range: the rescaled pass.
  const std::vector<mg::Tensor> huge = {mg::full({1000}, 1e200, mg::DType::float64),
                                        mg::full({10}, 1e-200, mg::DType::float64)};
  BOOST_TEST(relatively_close(scalar(mg::backend::grad_norm(to_gpu(huge), 2.0)),
                              scalar(mg::backend::grad_norm(huge, 2.0)), 1e-12));
  const std::vector<mg::Tensor> tiny = {mg::full({1000}, 1e-200, mg::DType::float64)};
  BOOST_TEST(relatively_close(scalar(mg::backend::grad_norm(to_gpu(tiny), 2.0)), std::sqrt(1000.0) * 1e-200, 1e-12));
  // NaN wins, also for the max norm
  std::vector<mg::Tensor> with_nan = to_gpu(cpu);
  mg::backend::fill(with_nan[5], std::numeric_limits<double>::quiet_NaN());
  BOOST_TEST(std::isnan(scalar(mg::backend::grad_norm(with_nan, 2.0))));
  BOOST_TEST(std::isnan(scalar(mg::backend::grad_norm(with_nan, std::numeric_limits<double>::infinity()))));
}

BOOST_AUTO_TEST_CASE(clip_by_norm_matches_the_cpu) {
  const std::vector<mg::Tensor> cpu = grad_list();
  const std::vector<mg::Tensor> gpu = to_gpu(cpu);
  const mg::Tensor norm = mg::full({}, 1234.5, mg::DType::float64);
  mg::backend::clip_by_norm(cpu, norm, 10.0);
  mg::backend::clip_by_norm(gpu, norm.to(kGpu), 10.0);
  for (size_t i = 0; i < cpu.size(); ++i) BOOST_TEST(bytes_of(gpu[i]) == bytes_of(cpu[i]), "tensor " << i);
  // a norm below max_norm, or not finite: nothing changes
  const std::vector<unsigned char> before = bytes_of(gpu[1]);
  mg::backend::clip_by_norm(gpu, mg::full({}, 5.0, mg::DType::float64, kGpu), 10.0);
  mg::backend::clip_by_norm(gpu, mg::full({}, std::numeric_limits<double>::infinity(), mg::DType::float64, kGpu), 10.0);
  BOOST_TEST(bytes_of(gpu[1]) == before);
}

BOOST_AUTO_TEST_CASE(scale_copy_and_update_scale_match_the_cpu) {
  const mg::Tensor dy = mg::normal({5, 7}, 0.0, 1.0);
  for (mg::DType dt : {mg::DType::float32, mg::DType::float16, mg::DType::bfloat16, mg::DType::float64}) {
    BOOST_TEST_CONTEXT("dtype " << dt) {
      const mg::Tensor scale = mg::full({1}, 65536.0, mg::DType::float64);
      const mg::Tensor out_cpu = mg::empty({7, 5}, dt), out_gpu = mg::empty({7, 5}, dt, kGpu);
      mg::backend::scale_copy(mg::F::transpose(dy, 0, 1), out_cpu, scale);
      mg::backend::scale_copy(mg::F::transpose(dy.to(kGpu), 0, 1), out_gpu, scale.to(kGpu));
      BOOST_TEST(bytes_of(out_gpu) == bytes_of(out_cpu));
      mg::backend::scale_copy(mg::Tensor(), out_cpu, scale);
      mg::backend::scale_copy(mg::Tensor(), out_gpu, scale.to(kGpu));
      BOOST_TEST(bytes_of(out_gpu) == bytes_of(out_cpu));
    }
  }
  const mg::backend::ScaleUpdateOptions o{
      .growth_factor = 2.0, .backoff_factor = 0.5, .min_scale = 1.0, .max_scale = 1e6, .growth_interval = 2};
  mg::Tensor s = mg::full({1}, 1024.0, mg::DType::float64, kGpu),
             inv = mg::full({1}, 1.0 / 1024, mg::DType::float64, kGpu);
  mg::Tensor tracker = mg::zeros({1}, mg::DType::int64, kGpu), flag = mg::zeros({1}, mg::DType::float32, kGpu);
  mg::backend::update_scale(s, inv, tracker, flag, o);          // clean: tracker 1
  mg::backend::update_scale(s, inv, tracker, mg::Tensor(), o);  // clean: grows
  BOOST_TEST(scalar(s) == 2048.0);
  BOOST_TEST(scalar(inv) == 1.0 / 2048);
  BOOST_TEST(scalar(tracker) == 0.0);
  mg::backend::fill(flag, 1.0);
  mg::backend::update_scale(s, inv, tracker, flag, o);  // overflow: backs off
  BOOST_TEST(scalar(s) == 1024.0);
}

BOOST_AUTO_TEST_CASE(optimizer_updates_match_the_cpu_and_skip_flagged_steps) {
  const mg::Tensor p0 = mg::normal({33, 17}, 0.0, 1.0);
  for (mg::DType grad_dt : {mg::DType::float32, mg::DType::float16}) {
    for (int kind = 0; kind < 4; ++kind) {  // sgd, sgd+momentum, adam, adamw+amsgrad
      BOOST_TEST_CONTEXT("kind " << kind << " grad " << grad_dt) {
        struct Side {
          mg::Tensor p, m, v, vmax, step, flag;
        };
        auto make = [&](mg::Device d) {
          Side s{p0.to(d).clone(),
                 mg::zeros({33, 17}, mg::DType::float32, d),
                 mg::zeros({33, 17}, mg::DType::float32, d),
                 mg::zeros({33, 17}, mg::DType::float32, d),
                 mg::zeros({}, mg::DType::int64, d),
                 mg::zeros({1}, mg::DType::float32, d)};
          return s;
        };
        Side cpu = make(kCpu), gpu = make(kGpu);
        auto run = [&](Side& s, const mg::Tensor& g) {
          if (kind < 2) {
            mg::backend::sgd_update(
                s.p, g, kind == 1 ? s.m : mg::Tensor(), s.step, s.flag,
                {.lr = 0.1, .momentum = kind == 1 ? 0.9 : 0.0, .weight_decay = 1e-2, .nesterov = kind == 1}, {});
          } else {
            mg::backend::adam_update(
                s.p, g, s.m, s.v, kind == 3 ? s.vmax : mg::Tensor(), s.step, s.flag,
                {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 1e-2, .decoupled = kind == 3},
                {});
          }
        };
        for (int it = 0; it < 3; ++it) {
          const mg::Tensor g = mg::normal({33, 17}, 0.0, 1.0).to(grad_dt);
          run(cpu, g);
          run(gpu, g.to(kGpu));
        }
        BOOST_TEST(scalar(gpu.step) == 3.0);
        const auto want = values(cpu.p), got = values(gpu.p);
        // relative to the largest parameter: the GPU may contract a * b + c into an FMA
        double scale = 0, worst = 0;
        for (double v : want) scale = std::max(scale, std::fabs(v));
        for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]) / scale);
        BOOST_TEST(worst < 1e-5);
        // a flagged step changes neither the parameter nor the count
        const std::vector<unsigned char> before = bytes_of(gpu.p);
        mg::backend::fill(gpu.flag, 1.0);
        run(gpu, mg::ones({33, 17}, grad_dt, kGpu));
        BOOST_TEST(bytes_of(gpu.p) == before);
        BOOST_TEST(scalar(gpu.step) == 3.0);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(dropout_draws_the_cpu_mask_for_a_seed) {
  for (mg::DType dt : {mg::DType::float32, mg::DType::float16, mg::DType::bfloat16, mg::DType::float64}) {
    BOOST_TEST_CONTEXT("dtype " << dt) {
      const mg::backend::DropoutParams p{.mask = {42, 1000, uint64_t{3} << 30}, .scale = 4.0};
      const mg::Tensor x = mg::normal({1001}, 0.0, 1.0).to(dt);
      const mg::Tensor cpu = mg::empty({1001}, dt), gpu = mg::empty({1001}, dt, kGpu);
      mg::backend::dropout_apply(x, cpu, p);
      mg::backend::dropout_apply(x.to(kGpu), gpu, p);
      BOOST_TEST(bytes_of(gpu) == bytes_of(cpu));
    }
  }
  // through the op: one seed, one mask on both devices
  mg::manual_seed(7);
  const mg::Tensor a = mg::F::dropout(mg::ones({4096}), 0.5, true);
  mg::manual_seed(7);
  const mg::Tensor b = mg::F::dropout(mg::ones({4096}, mg::DType::float32, kGpu), 0.5, true);
  BOOST_TEST(bytes_of(b) == bytes_of(a));
}

BOOST_AUTO_TEST_CASE(softmax_and_log_softmax_match_the_cpu) {
  for (mg::DType dt : kFloatingDTypes) {
    BOOST_TEST_CONTEXT("dtype " << dt) {
      const mg::Tensor x = mg::normal({6, 300, 3}, 0.0, 3.0).to(dt);
      for (int axis : {1, 2, 0}) {
        check_op([axis](const auto& v) { return mg::F::softmax(v[0], axis); }, {x}, kSumTolerances.of(dt));
        check_op([axis](const auto& v) { return mg::F::log_softmax(v[0], axis); }, {x}, kSumTolerances.of(dt));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(layer_norm_and_group_norm_match_the_cpu) {
  for (mg::DType dt : kFloatingDTypes) {
    BOOST_TEST_CONTEXT("dtype " << dt) {
      const mg::Tensor x = mg::normal({5, 4, 70}, 1.0, 2.0).to(dt);
      const mg::Tensor w = mg::normal({4, 70}, 1.0, 0.5), b = mg::normal({4, 70}, 0.0, 0.5);
      check_op(
          [](const auto& v) {
            return mg::F::layer_norm(v[0], {4, 70}, v[1], v[2]);
          },
          {x, w, b}, kSumTolerances.of(dt));
      check_op([](const auto& v) { return mg::F::layer_norm(v[0], {70}); }, {x}, kSumTolerances.of(dt));
      const mg::Tensor img = mg::normal({2, 6, 5, 5}, 0.5, 1.0).to(dt);
      check_op([](const auto& v) { return mg::F::group_norm(v[0], 3); }, {img}, kSumTolerances.of(dt));
    }
  }
}

BOOST_AUTO_TEST_CASE(losses_match_the_cpu) {
  const mg::Tensor labels = mg::tensor<int64_t>({0, 3, 9, 1, 1, 4, 7, 2}, {8});
  const mg::Tensor seg_labels = mg::tensor<int32_t>({0, 1, 2, 2, 1, 0, 0, 2, 1, 1, 0, 2}, {2, 6});
  for (mg::DType dt : kFloatingDTypes) {
    BOOST_TEST_CONTEXT("dtype " << dt) {
      const double tol = 2 * kSumTolerances.of(dt);
      const mg::Tensor logits = mg::normal({8, 10}, 0.0, 4.0).to(dt);
      const mg::Tensor seg = mg::normal({2, 3, 6}, 0.0, 2.0).to(dt);
      for (auto r : {mg::Reduction::mean, mg::Reduction::sum, mg::Reduction::none}) {
        BOOST_TEST_CONTEXT("reduction " << static_cast<int>(r)) {
          check_op(
              [&](const auto& v) { return mg::F::cross_entropy(v[0], labels.to(v[0].device()), {.reduction = r}); },
              {logits}, tol);
          check_op(
              [&](const auto& v) {
                return mg::F::cross_entropy(v[0], seg_labels.to(v[0].device()),
                                            {.reduction = r, .label_smoothing = 0.1});
              },
              {seg}, tol);
          check_op(
              [&](const auto& v) { return mg::F::nll_loss(v[0], labels.to(v[0].device()), {.reduction = r}); },
              {logits}, tol);
          const mg::Tensor pred = mg::normal({7, 9}, 0.0, 2.0).to(dt), target = mg::uniform({7, 9}).to(dt);
          check_op([r](const auto& v) { return mg::F::mse_loss(v[0], v[1], {.reduction = r}); }, {pred, target}, tol);
          check_op([r](const auto& v) { return mg::F::l1_loss(v[0], v[1], {.reduction = r}); }, {pred, target}, tol);
          check_op(
              [r](const auto& v) { return mg::F::binary_cross_entropy_with_logits(v[0], v[1], {.reduction = r}); },
              {pred, target}, tol);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(batch_norm_matches_the_cpu_in_training_and_inference) {
  for (mg::DType dt : kFloatingDTypes) {
    BOOST_TEST_CONTEXT("dtype " << dt) {
      const mg::DType stats = dt == mg::DType::float64 ? mg::DType::float64 : mg::DType::float32;
      for (const mg::Shape& shape : {mg::Shape{6, 3, 5, 5}, mg::Shape{16, 7}}) {
        const mg::Tensor x = mg::normal(shape, 2.0, 3.0).to(dt);
        const mg::Tensor w = mg::normal({shape[1]}, 1.0, 0.5).to(stats), b = mg::normal({shape[1]}, 0.0, 0.5).to(stats);
        for (bool training : {true, false}) {
          BOOST_TEST_CONTEXT("shape " << shape << " training " << training) {
            const mg::Tensor rm = mg::normal({shape[1]}, 0.0, 1.0), rv = mg::uniform({shape[1]}, 0.5, 2.0);
            const mg::Tensor rm_cpu = rm.clone(), rv_cpu = rv.clone(), rm_gpu = rm.to(kGpu), rv_gpu = rv.to(kGpu);
            check_op(
                [&](const auto& v) {
                  const bool gpu = v[0].device() == kGpu;
                  return mg::F::batch_norm(v[0], gpu ? rm_gpu : rm_cpu, gpu ? rv_gpu : rv_cpu, v[1], v[2],
                                           {.training = training});
                },
                {x, w, b}, kSumTolerances.of(dt));
            // the running statistics: updated once per run of check_op's forward
            const auto want_m = values(rm_cpu), got_m = values(rm_gpu);
            const auto want_v = values(rv_cpu), got_v = values(rv_gpu);
            for (size_t c = 0; c < want_m.size(); ++c) {
              BOOST_TEST(std::fabs(got_m[c] - want_m[c]) < 1e-4 * (1 + std::fabs(want_m[c])));
              BOOST_TEST(std::fabs(got_v[c] - want_v[c]) < 1e-4 * (1 + std::fabs(want_v[c])));
            }
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_bad_label_on_the_gpu_is_reported_at_the_next_synchronisation) {
  const mg::Tensor logits = mg::normal({4, 5}, 0.0, 1.0, mg::DType::float32).to(kGpu);
  const mg::Tensor bad = mg::tensor<int64_t>({1, 2, 5, -1}, {4}).to(kGpu);
  mg::Tensor loss;
  BOOST_CHECK_NO_THROW(loss = mg::F::cross_entropy(logits, bad));  // queued, not read
  BOOST_TEST(mg::backend::pending_check_count() >= 1);
  try {
    (void)loss.item<float>();
    BOOST_ERROR("no error at the synchronisation");
  } catch (const mg::ValueError& e) {
    const std::string what = e.what();
    BOOST_TEST(what.find("cross_entropy") != std::string::npos, what);
    BOOST_TEST(what.find("label 5 at index 2") != std::string::npos, what);
  }
  BOOST_TEST(mg::backend::pending_check_count() == 0);
  // eager checks: the call itself throws
  mg::backend::set_eager_status_checks(true);
  BOOST_CHECK_THROW(mg::F::nll_loss(logits, bad), mg::ValueError);
  mg::backend::set_eager_status_checks(false);
  // good labels: nothing to report
  const mg::Tensor good = mg::tensor<int64_t>({1, 2, 4, 0}, {4}).to(kGpu);
  BOOST_TEST(std::isfinite(mg::F::cross_entropy(logits, good).item<float>()));
}

// A two-layer MLP trained with float16 autocast, a GradScaler and Adam on
// the GPU follows the same run on the CPU, and its parameters, the scaler's
// state and the step counts stay on the device.
BOOST_AUTO_TEST_CASE(an_amp_training_step_on_the_gpu_follows_the_cpu) {
  auto run = [](mg::Device device) {
    mg::manual_seed(3);
    auto net = mg::nn::Sequential(mg::nn::Linear(16, 32), mg::nn::ReLU(), mg::nn::Linear(32, 4));
    net.to(device);
    const mg::Tensor x = mg::normal({64, 16}, 0.0, 1.0).to(device);
    const mg::Tensor y = mg::normal({64, 4}, 0.0, 1.0).to(device);
    mg::autodiff::GradManager gm;
    gm.attach(net.parameters());
    mg::optim::Adam opt(net.parameters(), {.lr = 1e-2});
    mg::amp::GradScaler scaler({.init_scale = 1024});
    for (int step = 0; step < 10; ++step) {
      {
        mg::amp::autocast ac(true, mg::DType::float16);
        auto rec = gm.record();
        scaler.backward(gm, mg::F::mse_loss(net(x), y));
      }
      opt.step().clear_grad();
      scaler.update();
    }
    for (const mg::Tensor& p : net.parameters()) BOOST_TEST(p.device() == device);
    mg::amp::autocast ac(true, mg::DType::float16);
    return scalar(mg::F::mse_loss(net(x), y));
  };
  const double cpu = run(kCpu);
  const double gpu = run(kGpu);
  BOOST_TEST(relatively_close(gpu, cpu, 2e-2), gpu << " vs " << cpu);
}

// After warm-up, a whole AMP step (autocast forward, scaled backward, the
// fused unscale and non-finite check, the flagged optimizer update and the
// scale update) makes no host synchronisation: the found-inf flag, the scale
// and the step count stay on the device until the user reads one.
BOOST_AUTO_TEST_CASE(an_amp_step_after_warm_up_makes_no_host_synchronisation) {
  mg::manual_seed(5);
  auto net = mg::nn::Sequential(mg::nn::Linear(16, 32), mg::nn::ReLU(), mg::nn::Linear(32, 4));
  net.to(kGpu);
  const mg::Tensor x = mg::normal({64, 16}, 0.0, 1.0).to(kGpu);
  const mg::Tensor y = mg::normal({64, 4}, 0.0, 1.0).to(kGpu);
  mg::autodiff::GradManager gm;
  gm.attach(net.parameters());
  mg::optim::AdamW opt(net.parameters(), {.lr = 1e-3});
  mg::amp::GradScaler scaler({.init_scale = 1024});
  auto step = [&] {
    {
      mg::amp::autocast ac(true, mg::DType::float16);
      auto rec = gm.record();
      scaler.backward(gm, mg::F::mse_loss(net(x), y));
    }
    opt.step().clear_grad();
    scaler.update();
  };
  warm_step_without_host_sync(step);  // the warm-up also builds the optimizer state
  const int64_t before = mg::backend::host_sync_count();
  BOOST_TEST(std::isfinite(scaler.scale_factor()));  // a host value: now it waits
  BOOST_TEST(mg::backend::host_sync_count() > before);
}

BOOST_AUTO_TEST_SUITE_END()
