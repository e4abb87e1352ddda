// The device seam (backend/dispatch.hpp): every dispatched backend function
// has its CPU kernel, and, in a CUDA build, its CUDA kernel (every family
// runs on CUDA). The CUDA kernels are registered by objects in the CUDA files
// that nothing references, so a forgotten (or dropped) registration fails
// here rather than in a user's CUDA run.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "mixgrad/cuda.hpp"
#include "backend/attention.hpp"
#include "backend/batch_norm.hpp"
#include "backend/conv.hpp"
#include "backend/copy.hpp"
#include "backend/dropout.hpp"
#include "backend/elementwise.hpp"
#include "backend/fp8.hpp"
#include "backend/indexing.hpp"
#include "backend/loss.hpp"
#include "backend/loss_scale.hpp"
#include "backend/matmul.hpp"
#include "backend/multi_tensor.hpp"
#include "backend/normalization.hpp"
#include "backend/optim.hpp"
#include "backend/pooling.hpp"
#include "backend/reduction.hpp"
#include "backend/resize.hpp"
#include "backend/scan.hpp"
#include "backend/softmax.hpp"
#include "backend/sorting.hpp"

namespace {

namespace backend = mixgrad::backend;
using mixgrad::DeviceType;

struct Entry {
  std::string name;  // as DeviceError names the op
  bool cpu, cuda;
};

template <class S>
Entry entry(const S& stub) {
  return {stub.name(), stub.has_kernel(DeviceType::cpu), stub.has_kernel(DeviceType::cuda)};
}

// Every stub, family by family, and where it runs.
std::vector<Entry> all_stubs() {
  using namespace backend;
  return {
      entry(attention_forward), entry(attention_backward),
      entry(batch_norm_forward), entry(batch_norm_backward), entry(batch_norm_update_running),
      entry(conv2d_forward), entry(conv2d_backward_data), entry(conv2d_backward_weights),
      entry(copy_kernel), entry(fill), entry(accumulate_kernel),
      entry(dropout_apply),
      entry(unary), entry(unary_grad), entry(binary), entry(binary_grad), entry(compare), entry(where),
      entry(check_indices), entry(index_select), entry(index_add), entry(gather), entry(scatter_add),
      entry(index_put_rows), entry(index_put),
      entry(cross_entropy_forward), entry(cross_entropy_backward), entry(nll_loss_forward),
      entry(nll_loss_backward), entry(pointwise_loss_forward), entry(pointwise_loss_backward),
      entry(scale_copy_kernel), entry(update_scale), entry(fp8_quantize_kernel), entry(fp8_encode),
      entry(fp8_decode), entry(fp8_gemm),
      entry(matmul),
      entry(non_finite_check_and_unscale_kernel), entry(non_finite_check_kernel), entry(grad_norm_kernel),
      entry(clip_by_norm_kernel),
      entry(layer_norm_forward), entry(layer_norm_backward),
      entry(sgd_update), entry(adam_update),
      entry(max_pool2d_forward), entry(max_pool2d_backward), entry(max_pool2d_argmax), entry(max_pool2d_gather),
      entry(avg_pool2d_forward), entry(avg_pool2d_backward), entry(adaptive_avg_pool2d_forward),
      entry(adaptive_avg_pool2d_backward),
      entry(reduce), entry(arg_reduce), entry(put_along_last_axis), entry(var_grad), entry(norm_grad),
      entry(sum_channels), entry(prod), entry(prod_grad),
      entry(pad_forward), entry(pad_backward), entry(upsample2d_forward), entry(upsample2d_backward),
      entry(cumsum),
      entry(softmax_forward), entry(softmax_backward),
      entry(sort_lines),
  };
}

// A stub of the test's own: an argument that says which device it is on,
// and kernels that report which of them ran.
struct On {
  mixgrad::Device device;
  int* ran;
};
mixgrad::Device device_of(const On& a) { return a.device; }
void cpu_kernel(const On& a) { *a.ran = 1; }
void cuda_kernel(const On& a) { *a.ran = 2; }
constinit backend::Stub<void(const On&), 0> probe{"probe", cpu_kernel};

}  // namespace

BOOST_AUTO_TEST_SUITE(dispatch)

BOOST_AUTO_TEST_CASE(a_stub_runs_the_kernel_of_its_arguments_device) {
  int ran = 0;
  probe({mixgrad::Device::cpu(), &ran});
  BOOST_TEST(ran == 1);
  try {
    probe({mixgrad::Device::cuda(), &ran});
    BOOST_ERROR("no CUDA kernel: expected DeviceError");
  } catch (const mixgrad::DeviceError& e) {
    BOOST_TEST(std::string(e.what()).starts_with("probe: "), e.what());
  }
  probe.set_cuda_kernel(cuda_kernel);
  probe({mixgrad::Device::cuda(), &ran});
  BOOST_TEST(ran == 2);
}

BOOST_AUTO_TEST_CASE(every_stub_has_its_cpu_kernel) {
  for (const Entry& e : all_stubs()) BOOST_TEST(e.cpu, e.name << " has no CPU kernel");
}

BOOST_AUTO_TEST_CASE(every_stub_has_its_cuda_kernel_in_a_cuda_build_and_none_without) {
  for (const Entry& e : all_stubs()) {
    const bool expected = mixgrad::cuda::is_built();  // every family has a CUDA kernel
    BOOST_TEST(e.cuda == expected, e.name << (e.cuda ? " has a CUDA kernel" : " has no CUDA kernel")
                                          << (mixgrad::cuda::is_built() ? " in this CUDA build" : " without CUDA"));
  }
}

BOOST_AUTO_TEST_CASE(stub_names_are_unique) {
  std::vector<std::string> names;
  for (const Entry& e : all_stubs()) names.push_back(e.name);
  std::sort(names.begin(), names.end());
  BOOST_TEST((std::adjacent_find(names.begin(), names.end()) == names.end()));
}

BOOST_AUTO_TEST_SUITE_END()
