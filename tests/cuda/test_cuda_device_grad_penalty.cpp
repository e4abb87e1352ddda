// Device test of a gradient penalty through GradScaler's automatic gear
// (`scaler.backward(gm, loss, {}, {.create_graph = true})`) on CUDA: the
// gradients of both passes match the same step on the CPU, and an overflow
// of the first pass skips the step. Part of test_cuda_device (exits 77
// without a device).
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace F = mixgrad::F;

namespace {

struct PenaltyStep {
  std::vector<std::vector<double>> first;   // unscaled gradients of the loss (the create_graph pass)
  std::vector<std::vector<double>> second;  // gradients of loss + ||grad||
  std::vector<std::vector<double>> params;  // after opt.step()
  bool overflow = false;
};

PenaltyStep penalty_step(mg::Device d, bool inject_inf) {
  mg::manual_seed(11);
  std::vector<mg::Tensor> p = {mg::uniform({8, 8}, -0.35, 0.35).to(d), mg::uniform({8}, -0.35, 0.35).to(d)};
  const mg::Tensor x = mg::normal({4, 8}).to(d), y = mg::normal({4, 8}).to(d);
  mg::amp::GradScaler scaler({.init_scale = 256.0});
  mg::autodiff::GradManager gm;
  gm.attach(p);
  mg::optim::SGD opt(p, {.lr = 0.5});
  PenaltyStep out;
  {
    auto rec = gm.record();
    mg::Tensor loss = F::mse_loss(F::linear(x, p[0], p[1]), y);
    const mg::Tensor dy = inject_inf ? mg::full({}, std::numeric_limits<double>::infinity()).to(d) : mg::Tensor();
    scaler.backward(gm, loss, dy, {.create_graph = true});
    mg::Tensor norm = mg::zeros({}, mg::DType::float32, d);
    for (const auto& t : p) {
      out.first.push_back(t.grad().to_vector<double>());
      norm = F::add(norm, F::sum(F::pow(t.grad(), 2.0)));
    }
    opt.clear_grad();
    scaler.backward(gm, F::add(loss, F::sqrt(norm)));
  }
  for (const auto& t : p) out.second.push_back(t.grad().to_vector<double>());
  out.overflow = scaler.found_non_finite();
  opt.step();
  for (const auto& t : p) out.params.push_back(t.to_vector<double>());
  return out;
}

void check_close(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b,
                 const char* what) {
  BOOST_TEST_REQUIRE(a.size() == b.size());
  for (size_t k = 0; k < a.size(); ++k)
    for (size_t j = 0; j < a[k].size(); ++j)
      BOOST_TEST(std::abs(a[k][j] - b[k][j]) <= 1e-4 * (1 + std::abs(b[k][j])),
                 what << " " << k << "/" << j << ": " << a[k][j] << " vs " << b[k][j]);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_device_grad_penalty)

BOOST_AUTO_TEST_CASE(automatic_gear_penalty_on_cuda_matches_the_cpu) {
  const PenaltyStep gpu = penalty_step(mg::Device::cuda(0), false), cpu = penalty_step(mg::Device::cpu(), false);
  BOOST_TEST(!gpu.overflow);
  check_close(gpu.first, cpu.first, "first pass");
  check_close(gpu.second, cpu.second, "penalised");
  check_close(gpu.params, cpu.params, "parameters");
}

BOOST_AUTO_TEST_CASE(an_overflow_of_the_create_graph_pass_skips_the_step_on_cuda) {
  mg::manual_seed(11);
  const std::vector<double> start = mg::uniform({8, 8}, -0.35, 0.35).to_vector<double>();
  const PenaltyStep gpu = penalty_step(mg::Device::cuda(0), true);
  BOOST_TEST(gpu.overflow);
  BOOST_TEST(gpu.params[0] == start, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
