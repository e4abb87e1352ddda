// Autocast cases ported from PyTorch's test/test_autocast.py
// (TestAutocastCPU, over torch/testing/_internal/autocast_test_lists.py's
// AutocastCPUTestLists, for the ops mixgrad has) and MegEngine's
// imperative/python/test/unit/amp/test_autocast.py. As upstream's
// _run_autocast_outofplace: under autocast the op returns the listed dtype
// and is bit for bit the op run without autocast on inputs cast by hand to
// the dtype it runs in.
#include <boost/test/unit_test.hpp>

#include <functional>
#include <string>
#include <vector>

#include "autocast_test_util.hpp"
#include "hooks/op_hooks.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;
namespace amp = mixgrad::amp;
namespace F = mixgrad::F;
using mg::DType;
using mg::Tensor;

namespace {

std::vector<double> values(const Tensor& t) { return t.to(DType::float64).to_vector<double>(); }

Tensor cast(const Tensor& t, DType d) { return mg::is_floating_point(t.dtype()) ? t.to(d) : t; }

// _run_autocast_outofplace: `op(args)` under autocast (low-precision dtype
// `amp_dtype`) has dtype `out_type` and equals `op(args cast to run_as)`
// computed with autocast off; autocast is on exactly inside the scope.
void run_autocast_outofplace(const std::string& name, const std::function<Tensor(const std::vector<Tensor>&)>& op,
                             const std::vector<Tensor>& args, DType run_as, DType out_type,
                             DType amp_dtype = DType::bfloat16) {
  BOOST_TEST_CONTEXT(name << " (autocast " << mg::to_string(amp_dtype) << ")") {
    BOOST_TEST(!amp::is_autocast_enabled());
    Tensor output;
    {
      amp::autocast scope(true, amp_dtype);
      BOOST_TEST(amp::is_autocast_enabled());
      output = op(args);
      BOOST_TEST(output.dtype() == out_type);
      {
        amp::autocast off(false);
        BOOST_TEST(!amp::is_autocast_enabled());
        std::vector<Tensor> cast_args;
        for (const auto& a : args) cast_args.push_back(cast(a, run_as));
        const Tensor control = op(cast_args);
        BOOST_TEST(control.dtype() == output.dtype());
        BOOST_TEST(values(output) == values(control), boost::test_tools::per_element());
      }
      BOOST_TEST(amp::is_autocast_enabled());
    }
    BOOST_TEST(!amp::is_autocast_enabled());
  }
}

constexpr int64_t n = 8;
Tensor randn(const mg::Shape& s, DType d = DType::float32) { return mg::normal(s, 0.0, 1.0, d); }

}  // namespace

BOOST_AUTO_TEST_SUITE(upstream_autocast)

// PyTorch TestAutocastCPU.test_autocast_torch_expect_builtin_promote (and
// test_autocast_methods_expect_builtin_promote, the same ops as operators):
// eq, ge, gt, le, lt, ne of float32 and bfloat16 / float16 give bool; add,
// div, mul give float32, by ordinary promotion.
BOOST_AUTO_TEST_CASE(pytorch_test_autocast_torch_expect_builtin_promote) {
  mg::manual_seed(1);
  using Binary = Tensor (*)(const Tensor&, const Tensor&);
  const std::vector<std::pair<std::string, Binary>> to_bool = {
      {"eq", &F::eq}, {"ge", &F::ge}, {"gt", &F::gt}, {"le", &F::le}, {"lt", &F::lt}, {"ne", &F::ne}};
  const std::vector<std::pair<std::string, Binary>> to_float = {{"add", &F::add}, {"div", &F::div}, {"mul", &F::mul}};
  for (DType low : {DType::bfloat16, DType::float16}) {
    // pointwise0_fp32 + pointwise1_bf16 / _fp16; some equal pairs so eq / ne see both answers
    Tensor a = randn({n}), b = randn({n}, low);
    a = F::concat({F::narrow(a, 0, 0, 6), F::narrow(b, 0, 6, 2).to(DType::float32)}, 0);
    for (const auto& entry : to_bool) {
      const Binary op = entry.second;
      run_autocast_outofplace(entry.first, [op](const auto& v) { return op(v[0], v[1]); }, {a, b}, DType::float32,
                              DType::bool_, low);
    }
    for (const auto& entry : to_float) {
      const Binary op = entry.second;
      run_autocast_outofplace(entry.first, [op](const auto& v) { return op(v[0], v[1]); }, {a, b}, DType::float32,
                              DType::float32, low);
    }
  }
}

// PyTorch TestAutocastCPU.test_autocast_torch_bf16 (torch_16 list: conv2d,
// mm, bmm, matmul; conv1d and conv_transpose2d are in
// tests/ops/test_conv_variants.cpp) and test_autocast_nn_bf16 (nn_16:
// linear): float32 inputs run in bfloat16.
// The products round their float32 operands here on any CPU, as PyTorch's do;
// without 16-bit math mixgrad's read them as they are (test_cpu_capabilities).
BOOST_AUTO_TEST_CASE(pytorch_test_autocast_torch_bf16_and_nn_bf16) {
  amp::detail::RoundedProducts rounded;
  mg::manual_seed(2);
  run_autocast_outofplace("conv2d", [](const auto& v) { return F::conv2d(v[0], v[1]); },
                          {randn({n, n, n, n}), randn({n, n, n, n})}, DType::bfloat16, DType::bfloat16);
  run_autocast_outofplace("mm", [](const auto& v) { return F::matmul(v[0], v[1]); }, {randn({n, n}), randn({n, n})},
                          DType::bfloat16, DType::bfloat16);
  run_autocast_outofplace("bmm", [](const auto& v) { return F::matmul(v[0], v[1]); },
                          {randn({n, n, n}), randn({n, n, n})}, DType::bfloat16, DType::bfloat16);
  run_autocast_outofplace("linear", [](const auto& v) { return F::linear(v[0], v[1]); }, {randn({n, n}), randn({n, n})},
                          DType::bfloat16, DType::bfloat16);
}

// PyTorch TestAutocastCPU.test_autocast_torch_fp32 / test_autocast_nn_fp32
// (torch_fp32 and nn_fp32 lists: binary_cross_entropy_with_logits, nll_loss,
// nll_loss2d (nll_loss over [N, C, H, W]), l1_loss, mse_loss; avg_pool3d is in tests/ops/test_pool_1d_3d.cpp):
// bfloat16 inputs run in float32.
BOOST_AUTO_TEST_CASE(pytorch_test_autocast_torch_fp32_and_nn_fp32) {
  mg::manual_seed(3);
  const DType bf = DType::bfloat16;
  run_autocast_outofplace("binary_cross_entropy_with_logits",
                          [](const auto& v) { return F::binary_cross_entropy_with_logits(v[0], v[1]); },
                          {randn({n, n}, bf), mg::uniform({n, n}, 0.0, 1.0, bf)}, DType::float32, DType::float32);
  run_autocast_outofplace("nll_loss", [](const auto& v) { return F::nll_loss(v[0], v[1]); },
                          {mg::uniform({n, n}, 0.0, 1.0, bf), mg::zeros({n}, DType::int64)}, DType::float32,
                          DType::float32);
  run_autocast_outofplace("nll_loss2d", [](const auto& v) { return F::nll_loss(v[0], v[1]); },
                          {mg::uniform({n, n, n, n}, 0.0, 1.0, bf), mg::zeros({n, n, n}, DType::int64)},
                          DType::float32, DType::float32);
  run_autocast_outofplace("l1_loss", [](const auto& v) { return F::l1_loss(v[0], v[1]); },
                          {randn({n, n}, bf), randn({n, n}, bf)}, DType::float32, DType::float32);
  run_autocast_outofplace("mse_loss", [](const auto& v) { return F::mse_loss(v[0], v[1]); },
                          {randn({n, n}, bf), randn({n, n}, bf)}, DType::float32, DType::float32);
}

// PyTorch TestAutocastCPU.test_autocast_torch_need_autocast_promote: cat and
// stack of bfloat16 / float16 with float32 run in float32 (the widest).
BOOST_AUTO_TEST_CASE(pytorch_test_autocast_torch_need_autocast_promote) {
  mg::manual_seed(4);
  for (DType low : {DType::bfloat16, DType::float16}) {
    const std::vector<Tensor> args = {randn({n}, low), randn({n})};
    run_autocast_outofplace("cat", [](const auto& v) { return F::concat(v, 0); }, args, DType::float32, DType::float32,
                            low);
    run_autocast_outofplace("stack", [](const auto& v) { return F::stack(v, 0); }, args, DType::float32,
                            DType::float32, low);
  }
}

// MegEngine test_autocast.py (its one case, named test_grad_scaler there):
// a scope with low / high dtypes is in force inside and restores the
// previous state on exit; assigning the global enabled / low_prec_dtype /
// high_prec_dtype sets the state of a thread with no scope, and assigning
// the originals back restores it. MegEngine reads `amp.enabled` for both;
// mixgrad's amp::enabled is the global default only, the state in force is
// amp::current_state() / amp::is_autocast_enabled().
BOOST_AUTO_TEST_CASE(megengine_test_autocast) {
  autocast_test::GlobalsGuard guard;
  const auto check = [](bool enabled, DType low, DType high) {
    const amp::AutocastState s = amp::current_state();
    BOOST_TEST(s.enabled == enabled);
    BOOST_TEST(amp::is_autocast_enabled() == enabled);
    BOOST_TEST(s.low_prec_dtype == low);
    BOOST_TEST(s.high_prec_dtype == high);
  };
  const bool origin_enabled = amp::enabled;
  const amp::AutocastState origin = amp::current_state();
  {
    amp::autocast scope(true, DType::float16, DType::float64);
    check(true, DType::float16, DType::float64);
  }
  check(origin_enabled, origin.low_prec_dtype, origin.high_prec_dtype);
  amp::enabled = true;
  amp::high_prec_dtype = DType::float64;
  amp::low_prec_dtype = DType::float16;
  BOOST_TEST(static_cast<bool>(amp::enabled));
  check(true, DType::float16, DType::float64);
  amp::enabled = origin_enabled;
  amp::high_prec_dtype = origin.high_prec_dtype;
  amp::low_prec_dtype = origin.low_prec_dtype;
  check(origin_enabled, origin.low_prec_dtype, origin.high_prec_dtype);
}

BOOST_AUTO_TEST_SUITE_END()
