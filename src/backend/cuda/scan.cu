// CUDA scans (backend/scan.hpp): one thread per (outer, inner) line, which
// it runs along the axis in order with its running value in float (double
// for float64), as the CPU does per line, so both round the same way.
#include <cuda_runtime_api.h>

#include "backend/cuda/check.hpp"
#include "backend/cuda/device_ptr.hpp"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/plan.hpp"
#include "backend/scan.hpp"
#include "kernels/cast.hpp"

namespace mixgrad::backend::cuda {

namespace {

using kernels::cast;
using kernels::compute_t;

template <class T>
__global__ void cumsum_kernel(const T* x, Axis3 a, bool reverse, T* out, int64_t columns) {
  using Acc = compute_t<T>;
  MIXGRAD_GRID_STRIDE_LOOP(c, columns) {
    const int64_t o = c / a.inner, i = c % a.inner;
    Acc acc = Acc(0);
    for (int64_t step = 0; step < a.axis; ++step) {
      const int64_t k = reverse ? a.axis - 1 - step : step;
      const int64_t p = (o * a.axis + k) * a.inner + i;
      acc += cast<Acc>(x[p]);
      out[p] = cast<T>(acc);
    }
  }
}

}  // namespace

void cumsum(const Tensor& x, Axis3 a, bool reverse, const Tensor& out) {
  const int64_t columns = a.outer * a.inner;
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(columns);
  if (lc.blocks == 0 || a.axis == 0) return;
  LaunchOn on(out);
  visit_floating(out.dtype(), "cumsum", [&]<class T>() {
    cumsum_kernel<T><<<lc.blocks, lc.threads, 0, on.stream>>>(device_ptr<const T>(x), a, reverse, device_ptr<T>(out),
                                                               columns);
  });
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

MIXGRAD_CUDA_KERNEL(cumsum, cumsum);

}  // namespace mixgrad::backend::cuda
