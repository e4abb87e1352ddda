// device_test_support.hpp — what the CUDA device tests share: the two
// devices and the dtype lists, the skip when there is no device, host copies
// of results, and the CPU-vs-CUDA comparison of a computation's output and
// input gradients within a per-dtype tolerance.
//
//   #include "device_test_support.hpp"
//   using namespace device_test;
//   for (mg::DType dt : kFloatingDTypes) {
//     const mg::Tensor x = mg::uniform({4, 5}, -1.0, 1.0).to(dt);
//     check_against_cpu([](const auto& xs) { return mg::F::softmax(xs[0], 1); }, {x},
//                       kSumTolerances.of(dt), seeded_normal(7));
//   }
//
// Tolerances are relative to the largest magnitude of the CPU result, as the
// two devices may sum in different orders; a NaN on the CPU must be a NaN on
// the device.
#pragma once

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/dispatch.hpp"
#include "backend/host_sync.hpp"
#include "mixgrad/mixgrad.hpp"

namespace mg = mixgrad;  // as in every test file

namespace device_test {

inline const mg::Device kGpu = mg::Device::cuda(0);
inline const mg::Device kCpu = mg::Device::cpu();

inline constexpr mg::DType kFloatingDTypes[] = {mg::DType::float32, mg::DType::float16, mg::DType::bfloat16,
                                                mg::DType::float64};
inline constexpr mg::DType kAllDTypes[] = {mg::DType::float32, mg::DType::float16, mg::DType::bfloat16,
                                           mg::DType::float64, mg::DType::int32,   mg::DType::int64,
                                           mg::DType::bool_,   mg::DType::int8,    mg::DType::uint8};

// ---- skipping ------------------------------------------------------------------

/// Meson's exit status for a skipped test.
inline constexpr int kSkipExitCode = 77;

/// Whether mixgrad has a CUDA device to run on; when not (a build without the
/// CUDA backend, no driver, or no GPU) it says so, and the suite's main
/// returns kSkipExitCode.
inline bool device_available() {
  if (mg::cuda::device_count() > 0) return true;
  std::printf("no CUDA device available (CUDA backend %s): skipped\n",
              mg::cuda::is_built() ? "built" : "not built");
  return false;
}

// ---- host copies -----------------------------------------------------------------

/// The raw bytes of t, on the host and contiguous: for bitwise comparisons.
inline std::vector<unsigned char> bytes_of(const mg::Tensor& t) {
  const mg::Tensor c = t.to(kCpu).contiguous();
  std::vector<unsigned char> out(static_cast<size_t>(c.numel() * mg::element_size(c.dtype())));
  if (!out.empty()) std::memcpy(out.data(), c.raw_data(), out.size());
  return out;
}

/// t's values in float64 on the host, contiguous.
inline std::vector<double> values(const mg::Tensor& t) {
  return t.to(kCpu).to(mg::DType::float64).contiguous().to_vector<double>();
}

/// The first of values(t).
inline double scalar(const mg::Tensor& t) { return values(t).at(0); }

/// Boost.Test's strong relative closeness, `BOOST_TEST(a == b, tolerance(t))`,
/// as a predicate the checks can combine: the difference is within `t` of
/// each magnitude. Equal values (infinities
/// included) are close; NaN is close to nothing.
inline bool relatively_close(double a, double b, double t) {
  if (a == b) return true;
  const double d = std::fabs(a - b);
  return d <= t * std::fabs(a) && d <= t * std::fabs(b);
}

/// Copies of CPU tensors on the device.
inline std::vector<mg::Tensor> to_gpu(const std::vector<mg::Tensor>& ts) {
  std::vector<mg::Tensor> out;
  for (const mg::Tensor& t : ts) out.push_back(t.to(kGpu));
  return out;
}

// ---- tolerances ------------------------------------------------------------------

/// A tolerance per floating dtype; float64's also stands for the other dtypes.
struct Tolerances {
  double float16, bfloat16, float32, float64;

  double of(mg::DType t) const {
    switch (t) {
      case mg::DType::float16: return float16;
      case mg::DType::bfloat16: return bfloat16;
      case mg::DType::float32: return float32;
      default: return float64;
    }
  }
};

/// For results that sum up to a few hundred terms, in another order on the device.
inline constexpr Tolerances kSumTolerances{4e-3, 3e-2, 1e-5, 1e-12};

/// How far a device result may lie from the CPU's: `tol` times the largest
/// magnitude of the CPU result (at least `floor`), or with `per_element`,
/// `tol` times 1 + |CPU value| element by element.
struct Closeness {
  double tol = 0;
  double floor = 1e-30;
  bool per_element = false;

  Closeness(double tol_, double floor_ = 1e-30, bool per_element_ = false)  // NOLINT(google-explicit-constructor)
      : tol(tol_), floor(floor_), per_element(per_element_) {}
};

// ---- comparing -------------------------------------------------------------------

/// Checks that `gpu` is a device tensor of `cpu`'s shape and dtype whose
/// values lie within `c` of `cpu`'s; a NaN on the CPU must be one on the device.
/// `what` names the result in failure messages.
inline void check_close(const mg::Tensor& gpu, const mg::Tensor& cpu, const Closeness& c, const std::string& what) {
  BOOST_TEST_REQUIRE(gpu.defined(), what);
  BOOST_TEST_REQUIRE(cpu.defined(), what);
  BOOST_TEST_REQUIRE(gpu.device() == kGpu, what);
  BOOST_TEST_REQUIRE(gpu.shape() == cpu.shape(), what);
  BOOST_TEST(gpu.dtype() == cpu.dtype(), what);
  const auto a = gpu.to(kCpu).to_vector<double>();
  const auto b = cpu.to_vector<double>();
  double scale = c.floor;
  for (double v : b)
    if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(b[i])) {
      BOOST_TEST(std::isnan(a[i]), what << " element " << i);
      continue;
    }
    if (std::isinf(b[i]) || c.tol == 0) {  // an infinity, or an exact comparison: the same value
      BOOST_TEST(a[i] == b[i], what << " element " << i << ": " << a[i] << " vs " << b[i]);
      continue;
    }
    const double bound = c.tol * (c.per_element ? 1 + std::fabs(b[i]) : scale);
    BOOST_TEST(std::fabs(a[i] - b[i]) <= bound, what << " element " << i << ": " << a[i] << " vs " << b[i]);
  }
}

/// A computation on a list of tensors, run once on each device.
using TensorFn = std::function<mg::Tensor(const std::vector<mg::Tensor>&)>;

/// The upstream gradient for an output y (the CPU's), drawn once and used on both devices.
using UpstreamFn = std::function<mg::Tensor(const mg::Tensor& y)>;

/// normal(0, 1) in y's shape and dtype, drawn after manual_seed(seed).
inline UpstreamFn seeded_normal(uint64_t seed) {
  return [seed](const mg::Tensor& y) {
    mg::manual_seed(seed);
    return mg::normal(y.shape(), 0.0, 1.0).to(y.dtype());
  };
}

namespace detail {

struct Run {
  mg::Tensor y;
  std::vector<mg::Tensor> grads;  // of the floating inputs, in order
};

// f on copies of `inputs` on d, backward with `dy` (drawn by make_dy on the first run).
inline Run run_on(const TensorFn& f, const std::vector<mg::Tensor>& inputs, mg::Device d, const UpstreamFn& make_dy,
                  mg::Tensor& dy) {
  std::vector<mg::Tensor> xs;
  for (const mg::Tensor& x : inputs) xs.push_back(x.to(d).clone());
  mg::autodiff::GradManager gm;
  for (const mg::Tensor& x : xs)
    if (mg::is_floating_point(x.dtype())) gm.attach(x);
  Run r;
  {
    auto recording = gm.record();
    r.y = f(xs);
    if (!dy.defined()) dy = make_dy(r.y);
    gm.backward(r.y, dy.to(d));
  }
  for (const mg::Tensor& x : xs)
    if (mg::is_floating_point(x.dtype())) r.grads.push_back(x.grad());
  return r;
}

}  // namespace detail

/// Runs f on copies of CPU `inputs` on the CPU and on the device,
/// backpropagates the same upstream gradient through both, and checks the
/// outputs and the floating inputs' gradients with check_close.
inline void check_against_cpu(const TensorFn& f, const std::vector<mg::Tensor>& inputs, const Closeness& c,
                              const UpstreamFn& make_dy) {
  mg::Tensor dy;
  const detail::Run cpu = detail::run_on(f, inputs, kCpu, make_dy, dy);
  const detail::Run gpu = detail::run_on(f, inputs, kGpu, make_dy, dy);
  check_close(gpu.y, cpu.y, c, "output");
  BOOST_TEST_REQUIRE(gpu.grads.size() == cpu.grads.size());
  for (size_t i = 0; i < cpu.grads.size(); ++i)
    check_close(gpu.grads[i], cpu.grads[i], c, "gradient " + std::to_string(i));
}

// ---- host synchronisation --------------------------------------------------------

/// Runs `step` twice to warm up (handles, workspaces, cached blocks), then
/// once more, checking that the third run makes no host synchronisation;
/// returns what that run returned.
template <class Step>
decltype(auto) warm_step_without_host_sync(Step&& step) {
  step();
  step();
  const int64_t before = mg::backend::host_sync_count();
  if constexpr (std::is_void_v<decltype(step())>) {
    step();
    BOOST_TEST(mg::backend::host_sync_count() == before);
  } else {
    auto result = step();
    BOOST_TEST(mg::backend::host_sync_count() == before);
    return result;
  }
}

}  // namespace device_test
