// Device tests of the CUDA elementwise, reduction and matmul families and of
// the host-synchronisation counter. Part of the test_cuda_device executable
// (whose main exits 77 without a device); the op registry's CPU-vs-CUDA axis
// (tests/ops, every_op_on_cuda_matches_the_cpu) covers every op in the
// floating dtypes, this file adds the integer and bool paths, views, large
// (split) reductions and a step that must not wait on the device.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "backend/elementwise.hpp"
#include "backend/host_sync.hpp"
#include "backend/reduction.hpp"
#include "device_test_support.hpp"
#include "mixgrad/mixgrad.hpp"

using namespace device_test;

namespace {

// Elementwise results are O(1) here, or exact: compared element by element,
// relative to 1 + |CPU value|.
void check_each(const mg::Tensor& gpu, const mg::Tensor& cpu, double tol) {
  check_close(gpu, cpu, Closeness(tol, 0, true), "result");
}

// float64 and the integers: the same order of operations per element, exact.
constexpr Tolerances kElementwiseTolerances{2e-3, 1e-2, 1e-5, 0.0};

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_device_ops)

BOOST_AUTO_TEST_CASE(integer_elementwise_and_compare_match_the_cpu) {
  for (mg::DType dt : {mg::DType::int32, mg::DType::int64}) {
    BOOST_TEST_CONTEXT("dtype " << dt) {
      const mg::Tensor a = mg::uniform({5, 7}, -50.0, 50.0).to(dt);
      const mg::Tensor b = mg::uniform({7}, 1.0, 9.0).to(dt);
      const mg::Tensor ga = a.to(kGpu), gb = b.to(kGpu);
      check_each(mg::F::add(ga, gb), mg::F::add(a, b), 0);
      check_each(mg::F::mul(ga, 3.0), mg::F::mul(a, 3.0), 0);
      check_each(mg::F::maximum(ga, gb), mg::F::maximum(a, b), 0);
      check_each(mg::F::neg(ga), mg::F::neg(a), 0);
      check_each(mg::F::abs(ga), mg::F::abs(a), 0);
      check_each(mg::F::lt(ga, gb), mg::F::lt(a, b), 0);
      check_each(mg::F::eq(ga, 0.0), mg::F::eq(a, 0.0), 0);
    }
  }
}

BOOST_AUTO_TEST_CASE(where_selects_every_dtype_bit_exact) {
  const mg::Tensor cond = mg::F::lt(mg::uniform({4, 6}), 0.0);
  for (mg::DType dt : {mg::DType::float32, mg::DType::float16, mg::DType::bfloat16, mg::DType::float64,
                       mg::DType::int32, mg::DType::int64}) {
    BOOST_TEST_CONTEXT("dtype " << dt) {
      const mg::Tensor a = mg::uniform({4, 6}, -3.0, 3.0).to(dt);
      const mg::Tensor b = mg::uniform({6}, -3.0, 3.0).to(dt);  // broadcast
      check_each(mg::F::where(cond.to(kGpu), a.to(kGpu), b.to(kGpu)), mg::F::where(cond, a, b), 0);
    }
  }
}

BOOST_AUTO_TEST_CASE(unary_ops_on_views_match_the_cpu_in_every_floating_dtype) {
  for (mg::DType dt : {mg::DType::float32, mg::DType::float16, mg::DType::bfloat16, mg::DType::float64}) {
    BOOST_TEST_CONTEXT("dtype " << dt) {
      const mg::Tensor x = mg::uniform({6, 5}, -2.0, 2.0).to(dt);
      const mg::Tensor t = mg::F::transpose(x, 0, 1);
      const mg::Tensor gt = mg::F::transpose(x.to(kGpu), 0, 1);
      check_each(mg::F::gelu(gt), mg::F::gelu(t), std::max(kElementwiseTolerances.of(dt), 1e-12));
      check_each(mg::F::relu(gt), mg::F::relu(t), 0);
      check_each(mg::F::pow(gt, 2.0), mg::F::pow(t, 2.0), std::max(kElementwiseTolerances.of(dt), 1e-12));
    }
  }
}

BOOST_AUTO_TEST_CASE(reductions_match_the_cpu_including_split_and_integer_ones) {
  for (mg::DType dt : {mg::DType::float32, mg::DType::float16, mg::DType::bfloat16, mg::DType::float64}) {
    BOOST_TEST_CONTEXT("dtype " << dt) {
      const double tol = std::max(kElementwiseTolerances.of(dt), 1e-10) * 10;
      const mg::Tensor x = mg::uniform({3, 4, 5}, -1.0, 1.0).to(dt);
      const mg::Tensor g = x.to(kGpu);
      check_each(mg::F::sum(g, {0, 2}), mg::F::sum(x, {0, 2}), tol);
      check_each(mg::F::mean(g, {1}, true), mg::F::mean(x, {1}, true), tol);
      check_each(mg::F::max(g, {2}), mg::F::max(x, {2}), 0);
      check_each(mg::F::var(g, {0}, false, 1), mg::F::var(x, {0}, false, 1), tol);
      check_each(mg::F::norm(g, 3.0, {1}), mg::F::norm(x, 3.0, {1}), tol);
      check_each(mg::F::argmax(g, 1), mg::F::argmax(x, 1), 0);
      const mg::Tensor big = mg::uniform({300'000}, -1.0, 1.0).to(dt);  // split over many blocks
      check_each(mg::F::sum(big.to(kGpu)), mg::F::sum(big), tol * 10);
      const mg::Tensor cols = mg::uniform({50, 2048}, -1.0, 1.0).to(dt);  // a thread per column
      check_each(mg::F::sum(cols.to(kGpu), {0}), mg::F::sum(cols, {0}), tol);
      check_each(mg::F::max(cols.to(kGpu), {0}), mg::F::max(cols, {0}), 0);
    }
  }
  const mg::Tensor xi = mg::uniform({64, 33}, -100.0, 100.0).to(mg::DType::int64);
  check_each(mg::F::sum(xi.to(kGpu), {0}), mg::F::sum(xi, {0}), 0);
  check_each(mg::F::min(xi.to(kGpu)), mg::F::min(xi), 0);
}

BOOST_AUTO_TEST_CASE(matmul_and_linear_match_the_cpu_in_every_floating_dtype) {
  for (mg::DType dt : {mg::DType::float32, mg::DType::float16, mg::DType::bfloat16, mg::DType::float64}) {
    BOOST_TEST_CONTEXT("dtype " << dt) {
      const double tol = std::max(kElementwiseTolerances.of(dt) * 10, 1e-10);
      const mg::Tensor a = mg::uniform({2, 33, 70}, -1.0, 1.0).to(dt);
      const mg::Tensor b = mg::uniform({70, 17}, -1.0, 1.0).to(dt);
      check_each(mg::F::matmul(a.to(kGpu), b.to(kGpu)), mg::F::matmul(a, b), tol);
      const mg::Tensor bt = mg::F::transpose(mg::uniform({2, 17, 70}, -1.0, 1.0).to(dt), 1, 2);
      check_each(mg::F::matmul(a.to(kGpu), bt.to(kGpu)), mg::F::matmul(a, bt), tol);
      const mg::Tensor w = mg::uniform({9, 70}, -1.0, 1.0).to(dt), bias = mg::uniform({9}, -1.0, 1.0).to(dt);
      check_each(mg::F::linear(a.to(kGpu), w.to(kGpu), bias.to(kGpu)), mg::F::linear(a, w, bias), tol);
    }
  }
}

BOOST_AUTO_TEST_CASE(operands_on_another_device_are_device_errors_and_change_nothing) {
  const mg::Tensor out = mg::full({3}, 7.0, mg::DType::float32, kGpu);
  const mg::Tensor host = mg::ones({3});
  using mg::backend::Operand;
  BOOST_CHECK_THROW(mg::backend::binary(mg::backend::BinaryOp::add, Operand(host), Operand(1.0), out), mg::DeviceError);
  BOOST_CHECK_THROW(mg::backend::reduce(mg::backend::ReduceOp::sum, mg::ones({3, 3}), 0b01, out, {}), mg::DeviceError);
  BOOST_TEST(out.to(kCpu).to_vector<float>() == std::vector<float>(3, 7.f), boost::test_tools::per_element());
}

// A forward and backward pass on the device after a warm-up makes no host
// synchronisation; reading a value back does.
BOOST_AUTO_TEST_CASE(a_step_on_the_device_does_not_wait_for_it) {
  const mg::Tensor x = mg::uniform({64, 32}, -1.0, 1.0).to(kGpu);
  const mg::Tensor w = mg::uniform({16, 32}, -0.2, 0.2).to(kGpu);
  const mg::Tensor b = mg::zeros({16}, mg::DType::float32, kGpu);
  auto step = [&] {
    mg::autodiff::GradManager gm;
    gm.attach(w);
    gm.attach(b);
    auto recording = gm.record();
    const mg::Tensor loss = mg::F::mean(mg::F::relu(mg::F::linear(x, w, b)));
    gm.backward(loss);
    return loss;
  };
  const mg::Tensor loss = warm_step_without_host_sync(step);
  const int64_t before = mg::backend::host_sync_count();
  const float value = loss.to(kCpu).to_vector<float>()[0];  // the user asks for a value: one wait
  BOOST_TEST(mg::backend::host_sync_count() > before);
  BOOST_TEST(std::isfinite(value));
  BOOST_TEST(w.grad().defined());
  BOOST_TEST(w.grad().device() == kGpu);
}

// No classes: every label is out of [0, 0). The row kernel has no row to
// run, and the loss must still be the CPU's bad-label error, not a reduction
// of scratch nobody wrote.
BOOST_AUTO_TEST_CASE(a_class_loss_with_no_classes_reports_the_first_label_as_bad) {
  const mg::Tensor labels = mg::tensor<int64_t>({0, 0, 0}, {3});
  for (mg::DType dt : kFloatingDTypes) {
    BOOST_TEST_CONTEXT("dtype " << dt) {
      const mg::Tensor logits = mg::zeros({3, 0}, dt);
      std::string cpu_what;
      try {
        (void)mg::F::cross_entropy(logits, labels);
        BOOST_ERROR("the CPU accepted labels with no classes");
      } catch (const mg::ValueError& e) {
        cpu_what = e.what();
      }
      try {
        const mg::Tensor loss = mg::F::cross_entropy(logits.to(kGpu), labels.to(kGpu));
        (void)loss.item<double>();  // the deferred label check runs here at the latest
        BOOST_ERROR("the device reduced a loss over no classes without an error");
      } catch (const mg::ValueError& e) {
        // The CPU's report (the descriptions differ only by the device suffix).
        const std::string what = e.what();
        BOOST_TEST(cpu_what.find("label 0 at index 0") != std::string::npos, cpu_what);
        BOOST_TEST(what.find("label 0 at index 0") != std::string::npos, what);
        BOOST_TEST(what.find("with 0 classes") != std::string::npos, what);
      }
      BOOST_CHECK_THROW((void)mg::F::nll_loss(logits.to(kGpu), labels.to(kGpu)).item<double>(), mg::ValueError);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
