// CUDA losses (backend/loss.hpp), through the kernels/loss.hpp functors.
//
// Class losses: the forward is a row kernel (one block per sample's row of
// classes, cuda_plan::row_plan over [outer, classes, inner]) that checks the
// sample's label where it reads it, records the first bad sample with an
// atomicMin, and writes the per-sample loss to a scratch array; a one-block
// kernel then writes the label status ({-1, 0} or {index, label}) and, when
// every label was good, the reduced loss. No host read anywhere: the op hands
// the status to the device's pending checks. The backwards are elementwise.
//
// Reductions over samples and elements are deterministic: fixed chunks per
// block, partials in double combined by one block in a fixed order.
#include <cuda_runtime_api.h>

#include <climits>

#include "backend/copy.hpp"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/check.hpp"
#include "backend/cuda/device_ptr.hpp"
#include "backend/cuda/plan.hpp"
#include "backend/cuda/row_plan.hpp"
#include "backend/cuda/stream.hpp"
#include "backend/loss.hpp"
#include "kernels/cast.hpp"
#include "kernels/loss.hpp"

namespace mixgrad::backend::cuda {

namespace {

using cuda_plan::RowPlan;
using kernels::cast;

constexpr int64_t kSumChunk = 8192;  // elements per partial sum of the pointwise losses

template <class L>
__device__ bool label_in_range(L label, int64_t classes) {
  return static_cast<uint64_t>(static_cast<int64_t>(label)) < static_cast<uint64_t>(classes);
}

// The upstream gradient's factor for sample i (the CPU's GradScale).
template <class T>
struct GradScale {
  const T* g;
  LossReduction reduction;
  int64_t n;
  __device__ kernels::compute_t<T> operator()(int64_t i) const {
    using Acc = kernels::compute_t<T>;
    if (reduction == LossReduction::none) return cast<Acc>(g[i]);
    const Acc u = cast<Acc>(g[0]);
    return reduction == LossReduction::mean ? u / static_cast<Acc>(n) : u;
  }
};

// ---- class losses -----------------------------------------------------------

template <class T, class L>
__global__ void __launch_bounds__(cuda_plan::kRowThreads)
    cross_entropy_forward_kernel(RowPlan rp, const T* x, const L* y, kernels::compute_t<T> smoothing,
                                 kernels::compute_t<T>* loss, kernels::compute_t<T>* stats,
                                 unsigned long long* first_bad) {
  using Acc = kernels::compute_t<T>;
  const int64_t C = rp.length;
  const kernels::CrossEntropySample<Acc> sample{smoothing, Acc(1) / static_cast<Acc>(C)};
  for (int64_t r = blockIdx.x; r < rp.rows; r += gridDim.x) {
    const L label = y[r];
    if (!label_in_range(label, C)) {  // the same for the whole block
      if (threadIdx.x == 0) atomicMin(first_bad, static_cast<unsigned long long>(r));
      continue;
    }
    const int64_t base = rp.row_base(r);
    Acc m = -INFINITY;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
      const Acc v = cast<Acc>(x[base + j * rp.inner]);
      m = m < v ? v : m;
    }
    m = block_all_reduce(m, MaxOp{});
    Acc sum = 0, z_sum = 0;
    for (int64_t j = threadIdx.x; j < C; j += blockDim.x) {
      const Acc z = cast<Acc>(x[base + j * rp.inner]) - m;
      sum += exp(z);
      z_sum += z;
    }
    sum = block_all_reduce(sum, SumOp{});
    z_sum = block_all_reduce(z_sum, SumOp{});
    if (threadIdx.x == 0) {
      const Acc log_sum = log(sum);
      loss[r] = sample(log_sum, cast<Acc>(x[base + static_cast<int64_t>(label) * rp.inner]) - m, z_sum);
      stats[2 * r] = m;
      stats[2 * r + 1] = log_sum;
    }
  }
}

template <class T, class L>
__global__ void nll_forward_kernel(const T* x, const L* y, int64_t samples, int64_t C, int64_t inner,
                                   kernels::compute_t<T>* loss, unsigned long long* first_bad) {
  using Acc = kernels::compute_t<T>;
  MIXGRAD_GRID_STRIDE_LOOP(s, samples) {
    const L label = y[s];
    if (!label_in_range(label, C)) {
      atomicMin(first_bad, static_cast<unsigned long long>(s));
      continue;
    }
    const int64_t o = s / inner, i = s - o * inner;
    loss[s] = -cast<Acc>(x[(o * C + static_cast<int64_t>(label)) * inner + i]);
  }
}

// One block: the label status, then (all labels good) the reduced loss.
template <class T, class L>
__global__ void __launch_bounds__(cuda_plan::kRowThreads)
    class_loss_finish_kernel(const kernels::compute_t<T>* loss, int64_t samples, const L* y,
                             const unsigned long long* first_bad, int64_t* status, LossReduction reduction, T* out) {
  const unsigned long long first = *first_bad;
  const bool bad = first < static_cast<unsigned long long>(samples);
  if (threadIdx.x == 0) {
    status[0] = bad ? static_cast<int64_t>(first) : -1;
    status[1] = bad ? static_cast<int64_t>(y[first]) : 0;
  }
  if (bad) return;
  if (reduction == LossReduction::none) {
    for (int64_t s = threadIdx.x; s < samples; s += blockDim.x) out[s] = cast<T>(loss[s]);
    return;
  }
  double acc = 0;
  for (int64_t s = threadIdx.x; s < samples; s += blockDim.x) acc += static_cast<double>(loss[s]);
  const double total = block_all_reduce(acc, SumOp{});
  // a mean of no samples is 0 / 0 = nan, as on the CPU
  if (threadIdx.x == 0)
    out[0] = cast<T>(reduction == LossReduction::mean ? total / static_cast<double>(samples) : total);
}

template <class T, class L>
__global__ void cross_entropy_backward_kernel(const T* x, const L* y, const kernels::compute_t<T>* stats,
                                              GradScale<T> scale, kernels::compute_t<T> on, kernels::compute_t<T> off,
                                              int64_t C, int64_t inner, int64_t n, T* gx) {
  using Acc = kernels::compute_t<T>;
  MIXGRAD_GRID_STRIDE_LOOP(k, n) {
    const int64_t o = k / (C * inner), rem = k - o * C * inner;
    const int64_t c = rem / inner, i = rem - c * inner;
    const int64_t s = o * inner + i;
    const Acc target = c == static_cast<int64_t>(y[s]) ? on : off;
    gx[k] = cast<T>(kernels::cross_entropy_grad(cast<Acc>(x[k]) - stats[2 * s], stats[2 * s + 1], target, scale(s)));
  }
}

template <class T, class L>
__global__ void nll_backward_kernel(const L* y, GradScale<T> scale, int64_t C, int64_t inner, int64_t n, T* gx) {
  MIXGRAD_GRID_STRIDE_LOOP(k, n) {
    const int64_t o = k / (C * inner), rem = k - o * C * inner;
    const int64_t c = rem / inner, i = rem - c * inner;
    const int64_t s = o * inner + i;
    gx[k] = c == static_cast<int64_t>(y[s]) ? cast<T>(-scale(s)) : cast<T>(0.0f);
  }
}

// ---- pointwise losses ---------------------------------------------------------

template <template <class> class Loss, class T>
__global__ void pointwise_none_kernel(const T* p, const T* t, T* out, int64_t n) {
  using Acc = kernels::compute_t<T>;
  const Loss<Acc> f;
  MIXGRAD_GRID_STRIDE_LOOP(i, n) out[i] = cast<T>(f.value(cast<Acc>(p[i]), cast<Acc>(t[i])));
}

// Block b sums chunk b (kSumChunk elements) into partial[b], in double.
template <template <class> class Loss, class T>
__global__ void __launch_bounds__(cuda_plan::kRowThreads)
    pointwise_partial_kernel(const T* p, const T* t, int64_t n, double* partial) {
  using Acc = kernels::compute_t<T>;
  const Loss<Acc> f;
  const int64_t lo = static_cast<int64_t>(blockIdx.x) * kSumChunk;
  const int64_t hi = min(n, lo + kSumChunk);
  double acc = 0;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x)
    acc += static_cast<double>(f.value(cast<Acc>(p[i]), cast<Acc>(t[i])));
  const double total = block_all_reduce(acc, SumOp{});
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

template <class T>
__global__ void __launch_bounds__(cuda_plan::kRowThreads)
    sum_partials_kernel(const double* partial, int64_t count, int64_t n, bool mean, T* out) {
  double acc = 0;
  for (int64_t b = threadIdx.x; b < count; b += blockDim.x) acc += partial[b];
  const double total = block_all_reduce(acc, SumOp{});
  if (threadIdx.x == 0) out[0] = cast<T>(mean ? total / static_cast<double>(n) : total);
}

template <template <class> class Loss, class T>
__global__ void pointwise_backward_kernel(const T* p, const T* t, GradScale<T> scale, T* gp, T* gt, int64_t n) {
  using Acc = kernels::compute_t<T>;
  const Loss<Acc> f;
  MIXGRAD_GRID_STRIDE_LOOP(i, n) {
    const Acc k = scale(i), pv = cast<Acc>(p[i]), tv = cast<Acc>(t[i]);
    if (gp) gp[i] = cast<T>(k * f.grad_pred(pv, tv));
    if (gt) gt[i] = cast<T>(k * f.grad_target(pv, tv));
  }
}

// ---- host side -----------------------------------------------------------------

template <class F>
void visit_labels(DType t, F&& f) {
  if (t == DType::int32)
    f.template operator()<int32_t>();
  else
    f.template operator()<int64_t>();
}

template <class F>
void visit_pointwise(PointwiseLoss kind, F&& f) {
  switch (kind) {
    case PointwiseLoss::mse:
      return f.template operator()<kernels::MseLoss>();
    case PointwiseLoss::l1:
      return f.template operator()<kernels::L1Loss>();
    case PointwiseLoss::bce_with_logits:
      return f.template operator()<kernels::BceWithLogitsLoss>();
  }
}

// The per-sample scratch and the first-bad-sample word of a class loss.
struct ClassScratch {
  Tensor loss, first_bad;
  ClassScratch(const ClassLossArgs& a, DType acc, cudaStream_t stream)
      : loss(empty(Shape{a.layout.samples()}, acc, a.input.device())),
        first_bad(empty(Shape{1}, DType::int64, a.input.device())) {
    // all bits set: no bad sample yet (atomicMin lowers it)
    MIXGRAD_CUDA_CHECK(cudaMemsetAsync(first_bad.raw_data(), 0xff, sizeof(unsigned long long), stream));
  }
  unsigned long long* first() const { return static_cast<unsigned long long*>(first_bad.raw_data()); }
};

template <class T, class L>
void finish_class_loss(const ClassLossArgs& a, const ClassScratch& sc, const Tensor& label_status, const Tensor& out,
                       cudaStream_t stream) {
  using Acc = kernels::compute_t<T>;
  class_loss_finish_kernel<T, L><<<1, cuda_plan::kRowThreads, 0, stream>>>(
      static_cast<const Acc*>(sc.loss.raw_data()), a.layout.samples(), device_ptr<const L>(a.labels), sc.first(),
      device_ptr<int64_t>(label_status), a.reduction, device_ptr<T>(out));
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

DType acc_dtype(DType t) { return t == DType::float64 ? DType::float64 : DType::float32; }

}  // namespace

void cross_entropy_forward(const ClassLossArgs& a, const Tensor& out, const Tensor& stats, const Tensor& label_status) {
  LaunchOn on(out);
  const ClassScratch sc(a, acc_dtype(a.input.dtype()), on.stream);
  const RowPlan rp = cuda_plan::row_plan(a.layout.outer, a.layout.classes, a.layout.inner);
  visit_floating(a.input.dtype(), "cross_entropy", [&]<class T>() {
    using Acc = kernels::compute_t<T>;
    visit_labels(a.labels.dtype(), [&]<class L>() {
      if (rp.blocks != 0) {
        cross_entropy_forward_kernel<T, L><<<rp.blocks, cuda_plan::kRowThreads, 0, on.stream>>>(
            rp, device_ptr<const T>(a.input), device_ptr<const L>(a.labels), static_cast<Acc>(a.label_smoothing),
            static_cast<Acc*>(sc.loss.raw_data()), device_ptr<Acc>(stats), sc.first());
        MIXGRAD_CUDA_CHECK(cudaGetLastError());
      } else if (a.layout.samples() > 0) {
        // No classes: no row kernel runs, yet every label is out of [0, 0),
        // so sample 0 is the first bad one (the CPU's report). Without this
        // the finish kernel would reduce the unwritten scratch as a loss.
        MIXGRAD_CUDA_CHECK(cudaMemsetAsync(sc.first(), 0, sizeof(unsigned long long), on.stream));
      }
      finish_class_loss<T, L>(a, sc, label_status, out, on.stream);
    });
  });
}

void cross_entropy_backward(const ClassLossArgs& a, const Tensor& stats, const Tensor& grad_out,
                            const Tensor& grad_input) {
  LaunchOn on(grad_input);
  const int64_t n = grad_input.numel();
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(n);
  if (lc.blocks == 0) return;
  visit_floating(a.input.dtype(), "cross_entropy", [&]<class T>() {
    using Acc = kernels::compute_t<T>;
    const kernels::SmoothedTarget<Acc> q(static_cast<Acc>(a.label_smoothing), a.layout.classes);
    const GradScale<T> scale{device_ptr<const T>(grad_out), a.reduction, a.layout.samples()};
    visit_labels(a.labels.dtype(), [&]<class L>() {
      cross_entropy_backward_kernel<T, L><<<lc.blocks, lc.threads, 0, on.stream>>>(
          device_ptr<const T>(a.input), device_ptr<const L>(a.labels), device_ptr<const Acc>(stats), scale, q.on, q.off,
          a.layout.classes, a.layout.inner, n, device_ptr<T>(grad_input));
    });
  });
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

void nll_loss_forward(const ClassLossArgs& a, const Tensor& out, const Tensor& label_status) {
  LaunchOn on(out);
  const ClassScratch sc(a, acc_dtype(a.input.dtype()), on.stream);
  const int64_t samples = a.layout.samples();
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(samples);
  visit_floating(a.input.dtype(), "nll_loss", [&]<class T>() {
    using Acc = kernels::compute_t<T>;
    visit_labels(a.labels.dtype(), [&]<class L>() {
      if (lc.blocks != 0) {
        nll_forward_kernel<T, L><<<lc.blocks, lc.threads, 0, on.stream>>>(
            device_ptr<const T>(a.input), device_ptr<const L>(a.labels), samples, a.layout.classes, a.layout.inner,
            static_cast<Acc*>(sc.loss.raw_data()), sc.first());
        MIXGRAD_CUDA_CHECK(cudaGetLastError());
      }
      finish_class_loss<T, L>(a, sc, label_status, out, on.stream);
    });
  });
}

void nll_loss_backward(const ClassLossArgs& a, const Tensor& grad_out, const Tensor& grad_input) {
  LaunchOn on(grad_input);
  const int64_t n = grad_input.numel();
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(n);
  if (lc.blocks == 0) return;
  visit_floating(grad_input.dtype(), "nll_loss", [&]<class T>() {
    const GradScale<T> scale{device_ptr<const T>(grad_out), a.reduction, a.layout.samples()};
    visit_labels(a.labels.dtype(), [&]<class L>() {
      nll_backward_kernel<T, L><<<lc.blocks, lc.threads, 0, on.stream>>>(
          device_ptr<const L>(a.labels), scale, a.layout.classes, a.layout.inner, n, device_ptr<T>(grad_input));
    });
  });
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

void pointwise_loss_forward(const PointwiseLossArgs& a, const Tensor& out) {
  LaunchOn on(out);
  const int64_t n = a.pred.numel();
  visit_pointwise(a.kind, [&]<template <class> class Loss>() {
    visit_floating(a.pred.dtype(), "loss", [&]<class T>() {
      if (a.reduction == LossReduction::none) {
        const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(n);
        if (lc.blocks == 0) return;
        pointwise_none_kernel<Loss, T><<<lc.blocks, lc.threads, 0, on.stream>>>(
            device_ptr<const T>(a.pred), device_ptr<const T>(a.target), device_ptr<T>(out), n);
        MIXGRAD_CUDA_CHECK(cudaGetLastError());
        return;
      }
      const int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
      const Tensor partial = empty(Shape{std::max<int64_t>(chunks, 1)}, DType::float64, out.device());
      if (chunks > 0) {
        pointwise_partial_kernel<Loss, T><<<static_cast<unsigned>(chunks), cuda_plan::kRowThreads, 0, on.stream>>>(
            device_ptr<const T>(a.pred), device_ptr<const T>(a.target), n, device_ptr<double>(partial));
        MIXGRAD_CUDA_CHECK(cudaGetLastError());
      }
      sum_partials_kernel<T><<<1, cuda_plan::kRowThreads, 0, on.stream>>>(
          device_ptr<const double>(partial), chunks, n, a.reduction == LossReduction::mean, device_ptr<T>(out));
      MIXGRAD_CUDA_CHECK(cudaGetLastError());
    });
  });
}

void pointwise_loss_backward(const PointwiseLossArgs& a, const Tensor& grad_out, const LossGrads& grads) {
  LaunchOn on(grad_out);
  const int64_t n = a.pred.numel();
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(n);
  if (lc.blocks == 0) return;
  visit_pointwise(a.kind, [&]<template <class> class Loss>() {
    visit_floating(a.pred.dtype(), "loss", [&]<class T>() {
      const GradScale<T> scale{device_ptr<const T>(grad_out), a.reduction, n};
      pointwise_backward_kernel<Loss, T>
          <<<lc.blocks, lc.threads, 0, on.stream>>>(device_ptr<const T>(a.pred), device_ptr<const T>(a.target), scale,
                                                    grads.input.defined() ? device_ptr<T>(grads.input) : nullptr,
                                                    grads.target.defined() ? device_ptr<T>(grads.target) : nullptr, n);
      MIXGRAD_CUDA_CHECK(cudaGetLastError());
    });
  });
}

MIXGRAD_CUDA_KERNEL(cross_entropy_forward, cross_entropy_forward);
MIXGRAD_CUDA_KERNEL(cross_entropy_backward, cross_entropy_backward);
MIXGRAD_CUDA_KERNEL(nll_loss_forward, nll_loss_forward);
MIXGRAD_CUDA_KERNEL(nll_loss_backward, nll_loss_backward);
MIXGRAD_CUDA_KERNEL(pointwise_loss_forward, pointwise_loss_forward);
MIXGRAD_CUDA_KERNEL(pointwise_loss_backward, pointwise_loss_backward);

}  // namespace mixgrad::backend::cuda
