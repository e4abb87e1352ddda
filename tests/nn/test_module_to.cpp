// Module::to(DType) and Module::to(Device): in place, identities kept,
// integer buffers left alone, errors before anything changes.
#include <boost/test/unit_test.hpp>

#include "backend/dispatch.hpp"
#include "mixgrad/mixgrad.hpp"
#include "../common/test_util.hpp"
#include "mixgrad/ops/creation.hpp"

namespace mg = mixgrad;
namespace nn = mixgrad::nn;
using mg::DType;
namespace tt = boost::test_tools;

namespace {

using test_util::values;

// A Linear and a BatchNorm2d, a weight shared under two names and an
// integer buffer.
struct Net : nn::Module {
  std::shared_ptr<nn::Linear> fc = register_module("fc", nn::Linear(3, 2));
  std::shared_ptr<nn::BatchNorm2d> bn = register_module("bn", nn::BatchNorm2d(2));
  mg::Tensor tied = register_parameter("tied", fc->parameters()[0]);
  mg::Tensor steps = register_buffer("steps", mg::full({1}, 7.0, DType::int64));
  mg::Tensor forward(const mg::Tensor& x) override { return (*fc)(x); }
};

}  // namespace

BOOST_AUTO_TEST_CASE(to_dtype_casts_floating_tensors_in_place_and_keeps_identities) {
  mg::manual_seed(3);
  Net net;
  const std::vector<mg::Tensor> params = net.parameters();
  const std::vector<mg::Tensor> buffers = net.buffers();
  std::vector<uint64_t> ids;
  std::vector<std::vector<double>> before;
  for (const auto& t : params) {
    ids.push_back(t.id());
    before.push_back(values(t.to(DType::bfloat16)));  // what the cast must give
  }
  const uint64_t version = params[0].version();
  params[0].set_grad(mg::full(params[0].shape(), 0.5));

  BOOST_TEST(&net.to(DType::bfloat16) == &net);
  const std::vector<mg::Tensor> after = net.parameters();
  BOOST_TEST_REQUIRE(after.size() == params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    BOOST_TEST_CONTEXT("parameter " << i) {
      BOOST_TEST(params[i].dtype() == DType::bfloat16);  // the handles held before see the cast
      BOOST_TEST(after[i].id() == ids[i]);
      BOOST_TEST(values(params[i]) == before[i], tt::per_element());
    }
  }
  BOOST_TEST(params[0].version() > version);
  BOOST_TEST(net.tied.impl() == net.fc->parameters()[0].impl());  // still one tensor
  BOOST_TEST(params[0].grad().dtype() == DType::bfloat16);
  BOOST_TEST(values(params[0].grad())[0] == 0.5);
  for (const auto& b : buffers)
    if (b.impl() != net.steps.impl()) BOOST_TEST(b.dtype() == DType::bfloat16);
  BOOST_TEST(net.steps.dtype() == DType::int64);
  BOOST_TEST(values(net.steps)[0] == 7.0);
}

BOOST_AUTO_TEST_CASE(a_grad_manager_attached_before_to_trains_the_cast_parameters) {
  Net net;
  mg::autodiff::GradManager gm;
  gm.attach(net.parameters());
  net.to(DType::float64);
  const mg::Tensor x = mg::full({4, 3}, 1.0, DType::float64);
  {
    auto rec = gm.record();
    gm.backward(mg::F::sum(net(x)));
  }
  const mg::Tensor w = net.fc->parameters()[0];
  BOOST_TEST_REQUIRE(w.grad().defined());
  BOOST_TEST(w.grad().dtype() == DType::float64);
  BOOST_TEST(values(w.grad()) == std::vector<double>(6, 4.0), tt::per_element());  // d sum(x W^T) / dW = 4
}

BOOST_AUTO_TEST_CASE(to_a_non_floating_dtype_throws_and_changes_nothing) {
  Net net;
  const mg::Tensor w = net.fc->parameters()[0];
  const auto before = values(w);
  try {
    net.to(DType::int32);
    BOOST_FAIL("no DTypeError");
  } catch (const mg::DTypeError& e) {
    BOOST_TEST(std::string(e.what()).find("Module::to") != std::string::npos);
    BOOST_TEST(std::string(e.what()).find("int32") != std::string::npos);
  }
  BOOST_TEST(w.dtype() == DType::float32);
  BOOST_TEST(values(w) == before, tt::per_element());
}

BOOST_AUTO_TEST_CASE(to_a_missing_cuda_device_throws_device_error_and_changes_nothing) {
  // One past the last device: missing on every machine, with or without CUDA.
  const mg::Device missing = mg::Device::cuda(mg::cuda::device_count());
  Net net;
  const mg::Tensor w = net.fc->parameters()[0];
  const auto before = values(w);
  const uint64_t version = w.version();
  const void* data = w.raw_data();
  try {
    net.to(missing);
    BOOST_FAIL("no DeviceError");
  } catch (const mg::DeviceError& e) {
    BOOST_TEST(std::string(e.what()).find("Module::to") != std::string::npos);
    BOOST_TEST(std::string(e.what()).find(mg::to_string(missing)) != std::string::npos);
  }
  BOOST_TEST(w.device() == mg::Device::cpu());
  BOOST_TEST(w.raw_data() == data);
  BOOST_TEST(w.version() == version);
  BOOST_TEST(values(w) == before, tt::per_element());
}

BOOST_AUTO_TEST_CASE(to_the_current_device_or_dtype_changes_nothing) {
  Net net;
  const mg::Tensor w = net.fc->parameters()[0];
  const void* data = w.raw_data();
  const uint64_t version = w.version();
  net.to(mg::Device::cpu()).to(DType::float32);
  BOOST_TEST(w.raw_data() == data);
  BOOST_TEST(w.version() == version);
}

BOOST_AUTO_TEST_CASE(to_while_recording_throws_state_error) {
  Net net;
  mg::autodiff::GradManager gm;
  gm.attach(net.parameters());
  auto rec = gm.record();
  BOOST_CHECK_THROW(net.to(DType::bfloat16), mg::StateError);
  BOOST_TEST(net.fc->parameters()[0].dtype() == DType::float32);
}

// apex's keep_batchnorm_fp32: to(DType, {.keep_batch_norm_fp32 = true})
// leaves every BatchNorm2d's parameters and buffers in float32 and casts the
// rest; the model still runs forward and backward on 16-bit activations.
BOOST_AUTO_TEST_CASE(to_dtype_can_keep_batch_norm_in_float32) {
  mg::manual_seed(4);
  Net net;
  const uint64_t bn_version = net.bn->parameters()[0].version();
  BOOST_TEST(&net.to(DType::bfloat16, {.keep_batch_norm_fp32 = true}) == &net);
  for (const auto& [name, t] : net.bn->named_parameters()) BOOST_TEST(t.dtype() == DType::float32, name);
  for (const auto& [name, t] : net.bn->named_buffers()) BOOST_TEST(t.dtype() == DType::float32, name);
  BOOST_TEST(net.bn->parameters()[0].version() == bn_version);  // untouched, not re-cast
  BOOST_TEST(net.fc->weight().dtype() == DType::bfloat16);
  BOOST_TEST(net.fc->parameters()[1].dtype() == DType::bfloat16);
  BOOST_TEST(net.steps.dtype() == DType::int64);

  // A 16-bit activation through the float32 batch norm: output in the
  // activation's dtype, gradients in each parameter's own dtype.
  nn::BatchNorm2d& bn = *net.bn;
  mg::autodiff::GradManager gm;
  gm.attach(bn.parameters());
  const mg::Tensor x = mg::normal({2, 2, 3, 3}).to(DType::bfloat16);
  {
    auto rec = gm.record();
    const mg::Tensor y = bn(x);
    BOOST_TEST(y.dtype() == DType::bfloat16);
    gm.backward(mg::F::sum(mg::F::astype(y, DType::float32)));
  }
  BOOST_TEST(bn.parameters()[0].grad().dtype() == DType::float32);

  // Without the option everything floating is cast, batch norm included.
  Net plain;
  plain.to(DType::float16, {});
  for (const auto& t : plain.bn->parameters()) BOOST_TEST(t.dtype() == DType::float16);
  BOOST_CHECK_THROW(plain.to(DType::int32, {.keep_batch_norm_fp32 = true}), mg::DTypeError);
  BOOST_TEST(plain.fc->weight().dtype() == DType::float16);
}

BOOST_AUTO_TEST_CASE(call_casts_cast_floating_inputs_and_outputs_around_forward) {
  mg::manual_seed(6);
  nn::Linear fc(3, 2);
  fc.to(DType::bfloat16);
  const mg::Tensor x = mg::normal({4, 3});
  BOOST_CHECK_THROW(fc(x), mg::DTypeError);  // a float32 batch into a bfloat16 layer
  BOOST_TEST(&fc.set_call_casts({.input = DType::bfloat16, .output = DType::float32}) == &fc);

  // The casts are recorded ops: the float32 input gets a float32 gradient.
  mg::autodiff::GradManager gm;
  gm.attach({x});
  mg::Tensor y;
  {
    auto rec = gm.record();
    y = fc(x);
    gm.backward(mg::F::sum(y));
  }
  BOOST_TEST(y.dtype() == DType::float32);
  BOOST_TEST(x.grad().dtype() == DType::float32);
  const mg::Tensor by_hand = mg::F::astype(fc.forward(mg::F::astype(x, DType::bfloat16)), DType::float32);
  BOOST_TEST(values(y) == values(by_hand), tt::per_element());
  BOOST_CHECK_THROW(fc.forward(x), mg::DTypeError);  // forward() alone casts nothing

  // Integer inputs pass as they are.
  nn::Embedding emb(5, 2);
  emb.set_call_casts({.input = DType::float16, .output = DType::float64});
  BOOST_TEST(emb(mg::tensor(std::vector<int64_t>{0, 4}, {2})).dtype() == DType::float64);

  // A non-floating dtype is refused, changing nothing; {} removes the casts.
  BOOST_CHECK_THROW(fc.set_call_casts({.input = DType::int32, .output = std::nullopt}), mg::DTypeError);
  BOOST_TEST((fc.call_casts().input == std::optional(DType::bfloat16)));
  BOOST_TEST((fc.call_casts().output == std::optional(DType::float32)));
  fc.set_call_casts({});
  BOOST_CHECK_THROW(fc(x), mg::DTypeError);
}
