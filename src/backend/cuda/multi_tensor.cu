// CUDA multi-tensor kernels of gradient scaling and clipping
// (backend/multi_tensor.hpp). A list of gradients is cut into launches by
// the pure plan of cuda/multi_tensor_plan.hpp: one launch per table of up to
// kMaxLaunchTensors tensors of one dtype, one block per chunk of
// kChunkElements elements. The element math is kernels/grad_scaling.hpp's.
//
// Nothing here reads a device value on the host: the unscale factor, the
// found-inf flag (also set by the read-only check of an unscale fused into
// the optimizer update), the norm and the clip factor live in one-element device
// tensors and are read by the kernels, so GradScaler::unscale and
// clip_grad_norm queue work and return.
//
// The norm is deterministic: every block writes its partial (sum, max, NaN)
// to its slot of one array and a one-block kernel combines the slots in a
// fixed tree. When the sum of |x|^p left double's range, a second pass in
// units of a power of two near the largest |x| recomputes it, as on the CPU;
// its kernels always launch and return at once when the first pass sufficed
// (the decision is on the device).
#include <cuda_runtime_api.h>

#include <cmath>
#include <cub/block/block_reduce.cuh>
#include <string>
#include <vector>

#include "backend/copy.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/multi_tensor_plan.hpp"
#include "backend/cuda/plan.hpp"
#include "backend/cuda/stream.hpp"
#include "backend/multi_tensor.hpp"
#include "kernels/grad_scaling.hpp"

namespace mixgrad::backend::cuda {

namespace {

using cuda_plan::kMaxLaunchBlocks;
using cuda_plan::kMaxLaunchTensors;
using cuda_plan::kMultiThreads;
using cuda_plan::StridedIndexer;

// The kernel parameter of one launch: the tensors' base pointers and sizes,
// and for each block its tensor and chunk. A strided launch (one tensor)
// also walks `ix`.
struct Table {
  char* ptr[kMaxLaunchTensors];
  int64_t numel[kMaxLaunchTensors];
  uint8_t block_tensor[kMaxLaunchBlocks];
  int32_t block_chunk[kMaxLaunchBlocks];
  StridedIndexer<1> ix;
  bool strided;
};
static_assert(sizeof(Table) < 3500, "the kernel parameter must stay under 4 KiB");
static_assert(kMaxLaunchTensors <= 256, "block_tensor is a byte");

// The address of element i (of the whole tensor) of the block's tensor.
template <class T>
__device__ T* element(const Table& tab, int t, int64_t i) {
  if (tab.strided) {
    int64_t off[1];
    tab.ix.offsets(i, off);
    return reinterpret_cast<T*>(tab.ptr[t] + off[0]);
  }
  return reinterpret_cast<T*>(tab.ptr[t]) + i;
}

__device__ double scalar_at(const void* p, bool is64) {
  return is64 ? *static_cast<const double*>(p) : static_cast<double>(*static_cast<const float*>(p));
}

// Where a scale-and-check kernel gets its factor: the unscale reads inv_scale
// and reports a factor that is not finite in its arithmetic type through the
// flag (the CPU throws there); the clip reads the norm and applies
// max_norm / norm only when the norm is finite and above max_norm.
struct FactorSource {
  const void* value;
  bool is64;
  bool clip;
  bool in_float;  // unscale: some tensor of the list is not float64
  double max_norm;

  __device__ bool resolve(double& factor) const {
    const double v = scalar_at(value, is64);
    if (clip) {
      if (!isfinite(v) || !(v > max_norm)) return false;
      factor = max_norm / v;
      return true;
    }
    factor = v;
    return isfinite(v) && !(in_float && !isfinite(static_cast<float>(v)));
  }
};

template <class T>
__global__ void __launch_bounds__(kMultiThreads) scale_check_kernel(Table tab, FactorSource src, float* found_inf) {
  double factor = 0;
  if (!src.resolve(factor)) {
    // Unscale: a non-finite factor skips the step instead of zeroing or
    // poisoning every gradient. Clip: nothing to do.
    if (found_inf != nullptr && !src.clip && blockIdx.x == 0 && threadIdx.x == 0) *found_inf = 1.0f;
    return;
  }
  const kernels::ScaleCheck<T> op{kernels::applied_factor<T>(factor)};
  const int t = tab.block_tensor[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(tab.block_chunk[blockIdx.x]) * cuda_plan::kChunkElements;
  const int64_t end = min(tab.numel[t], begin + cuda_plan::kChunkElements);
  int bad = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) bad |= op(*element<T>(tab, t, i)) ? 1 : 0;
  if (__syncthreads_or(bad) && threadIdx.x == 0 && found_inf != nullptr) *found_inf = 1.0f;
}

// The read-only check of an unscale fused into the optimizer update
// (non_finite_check): flags g * inv_scale that is inf or NaN in T's
// arithmetic type, as kernels::ProductCheck; nothing is written but the flag.
// A factor that is not finite makes every product non-finite, so it flags
// too (the CPU's result, computed the same way).
template <class T>
__global__ void __launch_bounds__(kMultiThreads) check_kernel(Table tab, const void* inv_scale, bool is64,
                                                             float* found_inf) {
  const kernels::ProductCheck<T> op{kernels::applied_factor<T>(scalar_at(inv_scale, is64))};
  const int t = tab.block_tensor[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(tab.block_chunk[blockIdx.x]) * cuda_plan::kChunkElements;
  const int64_t end = min(tab.numel[t], begin + cuda_plan::kChunkElements);
  int bad = 0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) bad |= op(*element<const T>(tab, t, i)) ? 1 : 0;
  if (__syncthreads_or(bad) && threadIdx.x == 0) *found_inf = 1.0f;
}

// ---- norms -----------------------------------------------------------------

enum class NormKind { one, two, general, max };

struct NormAcc {
  double sum;
  double amax;
  double nan;  // 0 or 1 (a double keeps the partial array one dtype)
};

struct CombineNorm {
  __device__ NormAcc operator()(const NormAcc& a, const NormAcc& b) const {
    return {a.sum + b.sum, a.amax > b.amax ? a.amax : b.amax, a.nan + b.nan > 0 ? 1.0 : 0.0};
  }
};

// The second pass's scratch: [0] the divisor's inverse, [1] nonzero when the
// second pass must run.
constexpr int kInv = 0, kNeed = 1;

template <class T, NormKind K>
__global__ void __launch_bounds__(kMultiThreads)
    norm_partial_kernel(Table tab, double p, NormAcc* partial, const double* scratch, bool second) {
  if (second && scratch[kNeed] == 0.0) return;
  const kernels::NormTerm term{p, second ? scratch[kInv] : 1.0};
  const int t = tab.block_tensor[blockIdx.x];
  const int64_t begin = static_cast<int64_t>(tab.block_chunk[blockIdx.x]) * cuda_plan::kChunkElements;
  const int64_t end = min(tab.numel[t], begin + cuda_plan::kChunkElements);
  NormAcc acc{0.0, 0.0, 0.0};
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double v = kernels::cast<double>(*element<const T>(tab, t, i));
    const double a = fabs(v);
    acc.amax = a > acc.amax ? a : acc.amax;
    if (kernels::is_nan(v)) acc.nan = 1.0;
    if constexpr (K == NormKind::two) {
      const double s = a * term.inv_divisor;
      acc.sum += s * s;
    } else if constexpr (K == NormKind::one) {
      acc.sum += a * term.inv_divisor;
    } else if constexpr (K == NormKind::general) {
      acc.sum += term(v);
    }
  }
  using Reduce = cub::BlockReduce<NormAcc, kMultiThreads>;
  __shared__ typename Reduce::TempStorage temp;
  const NormAcc total = Reduce(temp).Reduce(acc, CombineNorm{});
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

constexpr int kFinalThreads = 256;

__device__ double norm_root(NormKind kind, double s, double p) {
  return kind == NormKind::two ? sqrt(s) : kind == NormKind::one ? s : pow(s, 1.0 / p);
}

// One block: combines the partials in a fixed order and writes the norm, or
// (first pass) asks for the rescaled second pass.
__global__ void __launch_bounds__(kFinalThreads)
    norm_final_kernel(const NormAcc* partial, int64_t count, NormKind kind, double p, double* out, double* scratch,
                      bool second) {
  if (second && scratch[kNeed] == 0.0) return;
  NormAcc acc{0.0, 0.0, 0.0};
  const CombineNorm combine;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) acc = combine(acc, partial[i]);
  using Reduce = cub::BlockReduce<NormAcc, kFinalThreads>;
  __shared__ typename Reduce::TempStorage temp;
  const NormAcc total = Reduce(temp).Reduce(acc, combine);
  if (threadIdx.x != 0) return;
  if (second) {
    *out = norm_root(kind, total.sum, p) / scratch[kInv];
    return;
  }
  scratch[kNeed] = 0.0;
  if (total.nan != 0.0 || isnan(total.sum)) {
    *out = nan("");
  } else if (kind == NormKind::max || isinf(total.amax)) {
    *out = total.amax;
  } else if (total.amax > 0.0 && (isinf(total.sum) || total.sum < 0x1p-960)) {
    const int k = max(-1020, min(1020, -ilogb(total.amax)));
    scratch[kInv] = ldexp(1.0, k);
    scratch[kNeed] = 1.0;
  } else {
    *out = norm_root(kind, total.sum, p);
  }
}

// ---- host side: plan, tables, launches ---------------------------------------

std::vector<cuda_plan::TensorRef> refs_of(std::span<const Tensor> tensors, const char* op) {
  std::vector<cuda_plan::TensorRef> refs;
  refs.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    if (!is_floating_point(t.dtype()))
      throw DTypeError(std::string(op) + ": expected floating tensors, got " + std::string(to_string(t.dtype())));
    if (t.device() != tensors.front().device())
      throw DeviceError(std::string(op) + ": tensors on " + to_string(tensors.front().device()) + " and " +
                        to_string(t.device()));
    refs.push_back({t.numel(), static_cast<int>(t.dtype()), t.is_contiguous()});
  }
  return refs;
}

Table table_of(const cuda_plan::MultiLaunch& l, std::span<const Tensor> tensors) {
  Table tab{};
  for (size_t k = 0; k < l.tensors.size(); ++k) {
    const Tensor& t = tensors[static_cast<size_t>(l.tensors[k])];
    tab.ptr[k] = static_cast<char*>(t.raw_data());
    tab.numel[k] = t.numel();
  }
  for (size_t b = 0; b < l.blocks.size(); ++b) {
    tab.block_tensor[b] = static_cast<uint8_t>(l.blocks[b].tensor);
    tab.block_chunk[b] = static_cast<int32_t>(l.blocks[b].offset / cuda_plan::kChunkElements);
  }
  tab.strided = l.strided;
  if (l.strided) {
    const Tensor& t = tensors[static_cast<size_t>(l.tensors.front())];
    tab.ix = cuda_plan::make_indexer<1>(t.shape(), {byte_strides(t)});
  }
  return tab;
}

DType dtype_of(const cuda_plan::MultiLaunch& l, std::span<const Tensor> tensors) {
  return tensors[static_cast<size_t>(l.tensors.front())].dtype();
}

void scale_pass(std::span<const Tensor> tensors, const FactorSource& src, float* found_inf, const char* op) {
  const std::vector<cuda_plan::MultiLaunch> plan = cuda_plan::plan_multi_tensor(refs_of(tensors, op));
  const int device = tensors.front().device().index();
  DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  for (const cuda_plan::MultiLaunch& l : plan) {
    const Table tab = table_of(l, tensors);
    visit_floating(dtype_of(l, tensors), op, [&]<class T>() {
      scale_check_kernel<T><<<static_cast<unsigned>(l.blocks.size()), kMultiThreads, 0, stream>>>(tab, src, found_inf);
    });
    MIXGRAD_CUDA_CHECK(cudaGetLastError());
  }
}

template <NormKind K>
void norm_launches(const std::vector<cuda_plan::MultiLaunch>& plan, std::span<const Tensor> tensors, double p,
                   NormAcc* partial, const double* scratch, bool second, cudaStream_t stream) {
  for (const cuda_plan::MultiLaunch& l : plan) {
    const Table tab = table_of(l, tensors);
    visit_floating(dtype_of(l, tensors), "grad_norm", [&]<class T>() {
      norm_partial_kernel<T, K><<<static_cast<unsigned>(l.blocks.size()), kMultiThreads, 0, stream>>>(
          tab, p, partial + l.first_block, scratch, second);
    });
    MIXGRAD_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace

void non_finite_check_and_unscale(std::span<const Tensor> tensors, const Tensor& found_inf, const Tensor& inv_scale) {
  bool in_float = false;
  for (const Tensor& t : tensors) in_float = in_float || t.dtype() != DType::float64;
  const FactorSource src{inv_scale.raw_data(), inv_scale.dtype() == DType::float64, false, in_float, 0.0};
  scale_pass(tensors, src, static_cast<float*>(found_inf.raw_data()), "non_finite_check_and_unscale");
}

void non_finite_check(std::span<const Tensor> tensors, const Tensor& found_inf, const Tensor& inv_scale) {
  constexpr const char* op = "non_finite_check";
  const std::vector<cuda_plan::MultiLaunch> plan = cuda_plan::plan_multi_tensor(refs_of(tensors, op));
  const int device = tensors.front().device().index();
  DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  const bool is64 = inv_scale.dtype() == DType::float64;
  auto* flag = static_cast<float*>(found_inf.raw_data());
  for (const cuda_plan::MultiLaunch& l : plan) {
    const Table tab = table_of(l, tensors);
    visit_floating(dtype_of(l, tensors), op, [&]<class T>() {
      check_kernel<T><<<static_cast<unsigned>(l.blocks.size()), kMultiThreads, 0, stream>>>(tab, inv_scale.raw_data(),
                                                                                           is64, flag);
    });
    MIXGRAD_CUDA_CHECK(cudaGetLastError());
  }
}

void grad_norm(std::span<const Tensor> tensors, double norm_type, const Tensor& out) {
  const std::vector<cuda_plan::MultiLaunch> plan = cuda_plan::plan_multi_tensor(refs_of(tensors, "grad_norm"));
  const Device device = out.device();
  DeviceGuard guard(device.index());
  const cudaStream_t stream = current_stream(device.index());
  const NormKind kind = std::isinf(norm_type) ? NormKind::max
                        : norm_type == 2.0    ? NormKind::two
                        : norm_type == 1.0    ? NormKind::one
                                              : NormKind::general;
  const int64_t blocks = std::max<int64_t>(cuda_plan::plan_blocks(plan), 1);
  // Partials and scratch come from the caching allocator, ordered on this
  // stream: freed when this returns, reused only by later work on it.
  static_assert(sizeof(NormAcc) == 3 * sizeof(double));
  Tensor partial_t = empty(Shape{blocks * 3}, DType::float64, device);
  Tensor scratch_t = empty(Shape{2}, DType::float64, device);
  MIXGRAD_CUDA_CHECK(cudaMemsetAsync(partial_t.raw_data(), 0, static_cast<size_t>(blocks) * sizeof(NormAcc), stream));
  auto* partial = static_cast<NormAcc*>(partial_t.raw_data());
  auto* scratch = static_cast<double*>(scratch_t.raw_data());
  auto* result = static_cast<double*>(out.raw_data());
  for (bool second : {false, true}) {
    if (second && kind == NormKind::max) break;  // the max needs no rescaling
    switch (kind) {
      case NormKind::one:
        norm_launches<NormKind::one>(plan, tensors, norm_type, partial, scratch, second, stream);
        break;
      case NormKind::two:
        norm_launches<NormKind::two>(plan, tensors, norm_type, partial, scratch, second, stream);
        break;
      case NormKind::general:
        norm_launches<NormKind::general>(plan, tensors, norm_type, partial, scratch, second, stream);
        break;
      case NormKind::max:
        norm_launches<NormKind::max>(plan, tensors, norm_type, partial, scratch, second, stream);
        break;
    }
    norm_final_kernel<<<1, kFinalThreads, 0, stream>>>(partial, blocks, kind, norm_type, result, scratch, second);
    MIXGRAD_CUDA_CHECK(cudaGetLastError());
  }
}

void clip_by_norm(std::span<const Tensor> tensors, const Tensor& norm, double max_norm) {
  const FactorSource src{norm.raw_data(), norm.dtype() == DType::float64, true, false, max_norm};
  scale_pass(tensors, src, nullptr, "clip_by_norm");
}

MIXGRAD_CUDA_KERNEL(non_finite_check_and_unscale_kernel, non_finite_check_and_unscale);
MIXGRAD_CUDA_KERNEL(non_finite_check_kernel, non_finite_check);
MIXGRAD_CUDA_KERNEL(grad_norm_kernel, grad_norm);
MIXGRAD_CUDA_KERNEL(clip_by_norm_kernel, clip_by_norm);

}  // namespace mixgrad::backend::cuda
