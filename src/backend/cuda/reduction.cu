// CUDA reductions: the reducers of kernels/reduce.hpp folded by block
// reductions (cub::BlockReduce) over the plan of cuda/reduce_plan.hpp, which
// maps the reduced dims of any strided input to (output, element) offsets.
//
// One pass per reducer: each block folds one output (or one split of it,
// when few outputs have many elements each: a reduce-all splits over up to
// 1024 blocks and a second, one-block-per-output pass combines the
// partials), or, for many contiguous columns (a bias gradient), each thread
// folds one column (or a range of its rows, combined after) so that a
// warp's reads are coalesced. Accumulators are acc_t<T> as on the CPU (float for the 16-bit
// floats and float32, double for float64, int64 for integers and bool); a
// final elementwise pass applies the post step (divide by n for mean / var,
// sqrt or 1/p power for norms) and converts to out's dtype. Instantiations
// are per (input dtype, reducer) and (accumulator, output dtype), never per
// dtype pair of input and output. prod and its gradient run one thread per
// line of the [outer, axis, inner] view, as the CPU's loop does per line.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cub/block/block_reduce.cuh>
#include <string>

#include "backend/copy.hpp"
#include "backend/cuda/device_ptr.hpp"
#include "backend/cuda/map.cuh"
#include "backend/cuda/reduce_plan.hpp"
#include "backend/reduction.hpp"
#include "kernels/reduce.hpp"

namespace mixgrad::backend::cuda {

namespace {

using cuda_plan::IndexSpace;
using cuda_plan::kReduceThreads;
using cuda_plan::ReducePlan;

template <class Red>
struct CombineOp {
  template <class A>
  __device__ __forceinline__ A operator()(const A& a, const A& b) const {
    return Red::combine(a, b);
  }
};

// partial[o * splits + s] = fold of split s of output o.
template <class T, class A, class Red>
__global__ void __launch_bounds__(kReduceThreads)
    fold_kernel(const T* x, IndexSpace kept, IndexSpace reduced, int64_t outputs, int64_t count, int64_t splits,
                Red red, const A* center, A* partial) {
  using BlockReduce = cub::BlockReduce<A, kReduceThreads>;
  __shared__ typename BlockReduce::TempStorage tmp;
  for (int64_t blk = blockIdx.x; blk < outputs * splits; blk += gridDim.x) {
    const int64_t o = blk / splits, s = blk % splits;
    int64_t b = 0, e = 0;
    cuda_plan::split_range(count, splits, s, b, e);
    const T* base = x + kept.offset(o);
    const A c = center ? center[o] : A(0);
    A acc = Red::identity();
    for (int64_t r = b + threadIdx.x; r < e; r += blockDim.x)
      acc = Red::combine(acc, red.map(kernels::cast<A>(base[reduced.offset(r)]), c));
    const A total = BlockReduce(tmp).Reduce(acc, CombineOp<Red>{});
    if (threadIdx.x == 0) partial[blk] = total;
    __syncthreads();  // tmp is reused by the next output
  }
}

// partial[o * splits + s] = fold of split s of output o by one thread, for
// thread t = s * outputs + o (ReducePlan::per_thread: many contiguous
// columns, so a warp reads 32 neighbouring elements per step).
template <class T, class A, class Red>
__global__ void fold_per_thread_kernel(const T* x, IndexSpace kept, IndexSpace reduced, int64_t outputs,
                                       int64_t count, int64_t splits, Red red, const A* center, A* partial) {
  MIXGRAD_GRID_STRIDE_LOOP(t, outputs * splits) {
    const int64_t o = t % outputs, s = t / outputs;
    int64_t b = 0, e = 0;
    cuda_plan::split_range(count, splits, s, b, e);
    const T* base = x + kept.offset(o);
    const A c = center ? center[o] : A(0);
    A acc = Red::identity();
    for (int64_t r = b; r < e; ++r) acc = Red::combine(acc, red.map(kernels::cast<A>(base[reduced.offset(r)]), c));
    partial[o * splits + s] = acc;
  }
}

// out[o] = combine of partial[o * splits .. + splits) by one thread.
template <class A, class Red>
__global__ void combine_per_thread_kernel(const A* partial, int64_t outputs, int64_t splits, A* out) {
  MIXGRAD_GRID_STRIDE_LOOP(o, outputs) {
    A acc = Red::identity();
    for (int64_t s = 0; s < splits; ++s) acc = Red::combine(acc, partial[o * splits + s]);
    out[o] = acc;
  }
}

// out[o] = combine of partial[o * splits .. + splits).
template <class A, class Red>
__global__ void __launch_bounds__(kReduceThreads)
    combine_kernel(const A* partial, int64_t outputs, int64_t splits, A* out) {
  using BlockReduce = cub::BlockReduce<A, kReduceThreads>;
  __shared__ typename BlockReduce::TempStorage tmp;
  for (int64_t o = blockIdx.x; o < outputs; o += gridDim.x) {
    A acc = Red::identity();
    for (int64_t s = threadIdx.x; s < splits; s += blockDim.x) acc = Red::combine(acc, partial[o * splits + s]);
    const A total = BlockReduce(tmp).Reduce(acc, CombineOp<Red>{});
    if (threadIdx.x == 0) out[o] = total;
    __syncthreads();
  }
}

enum class Post : uint8_t { none, divide, sqrt, root };

// out[i] = post(acc[i]) converted to O.
template <class A, class O>
__global__ void finalize_kernel(const A* acc, O* out, int64_t n, Post post, double param) {
  MIXGRAD_GRID_STRIDE_LOOP(i, n) {
    A v = acc[i];
    if constexpr (std::is_floating_point_v<A>) {
      if (post == Post::divide) v = v / static_cast<A>(param);
      else if (post == Post::sqrt) v = std::sqrt(v);
      else if (post == Post::root) v = std::pow(v, static_cast<A>(1.0 / param));
    }
    out[i] = kernels::cast<O>(v);
  }
}

unsigned grid_for(int64_t blocks) {
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(blocks, 1), cuda_plan::kMaxBlocks));
}

Tensor device_buffer(int64_t n, DType dtype, const Device& device) { return empty(Shape{n}, dtype, device); }

/// acc[o] = fold of output o of the plan, in a device buffer of A.
template <class T, class A, class Red>
Tensor fold(const T* x, const ReducePlan& p, const Red& red, const A* center, const Device& device,
            cudaStream_t stream) {
  Tensor acc = device_buffer(p.outputs, dtype_of<A>(), device);
  A* out = static_cast<A*>(acc.raw_data());
  if (p.per_thread) {
    Tensor partial;
    A* part = out;
    if (p.splits > 1) {
      partial = device_buffer(p.outputs * p.splits, dtype_of<A>(), device);
      part = static_cast<A*>(partial.raw_data());
    }
    const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(p.outputs * p.splits);
    fold_per_thread_kernel<T, A, Red><<<lc.blocks, lc.threads, 0, stream>>>(x, p.kept, p.reduced, p.outputs, p.count,
                                                                            p.splits, red, center, part);
    MIXGRAD_CUDA_CHECK(cudaGetLastError());
    if (p.splits > 1) {
      const cuda_plan::LaunchConfig lo = cuda_plan::launch_config(p.outputs);
      combine_per_thread_kernel<A, Red><<<lo.blocks, lo.threads, 0, stream>>>(part, p.outputs, p.splits, out);
      MIXGRAD_CUDA_CHECK(cudaGetLastError());
    }
    return acc;
  }
  if (p.splits == 1) {
    fold_kernel<T, A, Red><<<grid_for(p.outputs), kReduceThreads, 0, stream>>>(x, p.kept, p.reduced, p.outputs,
                                                                               p.count, 1, red, center, out);
    MIXGRAD_CUDA_CHECK(cudaGetLastError());
    return acc;
  }
  const Tensor partial = device_buffer(p.outputs * p.splits, dtype_of<A>(), device);
  A* part = static_cast<A*>(partial.raw_data());
  fold_kernel<T, A, Red><<<grid_for(p.outputs * p.splits), kReduceThreads, 0, stream>>>(
      x, p.kept, p.reduced, p.outputs, p.count, p.splits, red, center, part);
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
  combine_kernel<A, Red><<<grid_for(p.outputs), kReduceThreads, 0, stream>>>(part, p.outputs, p.splits, out);
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
  return acc;
}

/// out = post(acc), converted to out's dtype; out contiguous.
template <class A>
void finalize(const Tensor& acc, const Tensor& out, Post post, double param, cudaStream_t stream) {
  const int64_t n = out.numel();
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(n);
  if (lc.blocks == 0) return;
  visit_dtype(out.dtype(), [&]<class O>() {
    finalize_kernel<A, O><<<lc.blocks, lc.threads, 0, stream>>>(static_cast<const A*>(acc.raw_data()),
                                                                static_cast<O*>(out.raw_data()), n, post, param);
  });
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

// ---- arg_reduce and put_along_last_axis ------------------------------------

template <class T>
__global__ void arg_reduce_kernel(const T* x, int64_t outer, int64_t n, int64_t inner, bool want_max, int64_t* idx) {
  using C = kernels::compute_t<T>;
  MIXGRAD_GRID_STRIDE_LOOP(j, outer * inner) {
    const int64_t o = j / inner, i = j % inner;
    const T* base = x + o * n * inner + i;
    C best = kernels::cast<C>(base[0]);
    int64_t bi = 0;
    for (int64_t r = 1; r < n; ++r) {
      const C v = kernels::cast<C>(base[r * inner]);
      // strictly better, or the first NaN (as the CPU)
      const bool take = (want_max ? v > best : v < best) | ((v != v) & (best == best));
      if (take) best = v, bi = r;
    }
    idx[j] = bi;
  }
}

template <class T>
__global__ void put_kernel(const T* values, const int64_t* index, T* dst, int64_t rows, int64_t width) {
  MIXGRAD_GRID_STRIDE_LOOP(k, rows) { dst[k * width + index[k]] = values[k]; }
}

// prod along one axis: one thread per (outer, inner) line.
template <class T>
__global__ void prod_kernel(const T* x, Axis3 a, T* out, int64_t columns) {
  using Acc = kernels::compute_t<T>;
  MIXGRAD_GRID_STRIDE_LOOP(c, columns) {
    const int64_t o = c / a.inner, i = c % a.inner;
    Acc acc = Acc(1);
    for (int64_t k = 0; k < a.axis; ++k) acc *= kernels::cast<Acc>(x[(o * a.axis + k) * a.inner + i]);
    out[c] = kernels::cast<T>(acc);
  }
}

// The CPU's prefix * suffix products; the prefixes go to an Acc scratch laid
// out as x.
template <class T>
__global__ void prod_grad_kernel(const T* g, const T* x, Axis3 a, kernels::compute_t<T>* prefix, T* dx,
                                 int64_t columns) {
  using Acc = kernels::compute_t<T>;
  MIXGRAD_GRID_STRIDE_LOOP(c, columns) {
    const int64_t o = c / a.inner, i = c % a.inner;
    Acc run = Acc(1);
    for (int64_t k = 0; k < a.axis; ++k) {
      const int64_t p = (o * a.axis + k) * a.inner + i;
      prefix[p] = run;
      run *= kernels::cast<Acc>(x[p]);
    }
    const Acc gi = kernels::cast<Acc>(g[c]);
    run = Acc(1);
    for (int64_t k = a.axis - 1; k >= 0; --k) {
      const int64_t p = (o * a.axis + k) * a.inner + i;
      dx[p] = kernels::cast<T>(gi * prefix[p] * run);
      run *= kernels::cast<Acc>(x[p]);
    }
  }
}

Tensor contiguous_on_device(const Tensor& x) {
  if (x.is_contiguous()) return x;
  Tensor c = empty(x.shape(), x.dtype(), x.device());
  backend::copy(x, c);
  return c;
}

}  // namespace

void reduce(ReduceOp op, const Tensor& x, uint32_t axes, const Tensor& out, const ReduceParams& params) {
  if (out.numel() == 0) return;
  detail::check_same_device("reduce", x, out.device());
  const ReducePlan p = cuda_plan::make_reduce_plan(x.shape(), x.strides(), axes);
  const int device = out.device().index();
  DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  visit_dtype(x.dtype(), [&]<class T>() {
    using A = kernels::acc_t<T>;
    const T* px = static_cast<const T*>(x.raw_data());
    const Device dev = out.device();
    if constexpr (std::is_floating_point_v<A>) {
      switch (op) {
        case ReduceOp::sum: finalize<A>(fold<T, A>(px, p, kernels::SumReducer<A>{}, nullptr, dev, stream), out, Post::none, 0, stream); break;
        case ReduceOp::mean:
          finalize<A>(fold<T, A>(px, p, kernels::SumReducer<A>{}, nullptr, dev, stream), out, Post::divide,
                      static_cast<double>(p.count), stream);
          break;
        case ReduceOp::max: finalize<A>(fold<T, A>(px, p, kernels::MaxReducer<A>{}, nullptr, dev, stream), out, Post::none, 0, stream); break;
        case ReduceOp::min: finalize<A>(fold<T, A>(px, p, kernels::MinReducer<A>{}, nullptr, dev, stream), out, Post::none, 0, stream); break;
        case ReduceOp::var: {
          const Tensor sum = fold<T, A>(px, p, kernels::SumReducer<A>{}, nullptr, dev, stream);
          finalize<A>(sum, sum, Post::divide, static_cast<double>(p.count), stream);  // in place: the mean
          const Tensor sq = fold<T, A>(px, p, kernels::SquaredDeviationReducer<A>{}, static_cast<const A*>(sum.raw_data()), dev, stream);
          finalize<A>(sq, out, Post::divide, static_cast<double>(std::max<int64_t>(0, p.count - params.correction)), stream);
          break;
        }
        case ReduceOp::norm: {
          const double pn = params.p;
          if (pn == 2.0) finalize<A>(fold<T, A>(px, p, kernels::SquareReducer<A>{}, nullptr, dev, stream), out, Post::sqrt, 0, stream);
          else if (pn == 1.0) finalize<A>(fold<T, A>(px, p, kernels::AbsReducer<A>{}, nullptr, dev, stream), out, Post::none, 0, stream);
          else if (std::isinf(pn)) finalize<A>(fold<T, A>(px, p, kernels::MaxAbsReducer<A>{}, nullptr, dev, stream), out, Post::none, 0, stream);
          else finalize<A>(fold<T, A>(px, p, kernels::AbsPowReducer<A>{static_cast<A>(pn)}, nullptr, dev, stream), out, Post::root, pn, stream);
          break;
        }
      }
    } else {
      switch (op) {
        case ReduceOp::sum: finalize<A>(fold<T, A>(px, p, kernels::SumReducer<A>{}, nullptr, dev, stream), out, Post::none, 0, stream); break;
        case ReduceOp::max: finalize<A>(fold<T, A>(px, p, kernels::MaxReducer<A>{}, nullptr, dev, stream), out, Post::none, 0, stream); break;
        case ReduceOp::min: finalize<A>(fold<T, A>(px, p, kernels::MinReducer<A>{}, nullptr, dev, stream), out, Post::none, 0, stream); break;
        default:
          throw DTypeError("reduce: mean, var and norm need a floating tensor, got " + std::string(to_string(x.dtype())));
      }
    }
  });
}

void arg_reduce(ArgReduceOp op, const Tensor& x_in, int axis, const Tensor& out) {
  detail::check_same_device("arg_reduce", x_in, out.device());
  const int device = out.device().index();
  DeviceGuard guard(device);
  const Tensor x = contiguous_on_device(x_in);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.shape()[d];
  for (int d = axis + 1; d < x.ndim(); ++d) inner *= x.shape()[d];
  const int64_t n = x.ndim() == 0 ? 1 : x.shape()[axis];
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(outer * inner);
  if (lc.blocks == 0 || n == 0) return;
  visit_dtype(x.dtype(), [&]<class T>() {
    arg_reduce_kernel<T><<<lc.blocks, lc.threads, 0, current_stream(device)>>>(
        static_cast<const T*>(x.raw_data()), outer, n, inner, op == ArgReduceOp::max, static_cast<int64_t*>(out.raw_data()));
  });
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

void put_along_last_axis(const Tensor& values_in, const Tensor& index_in, const Tensor& dst) {
  detail::check_same_device("put_along_last_axis", values_in, dst.device());
  detail::check_same_device("put_along_last_axis", index_in, dst.device());
  const int device = dst.device().index();
  DeviceGuard guard(device);
  const Tensor values = contiguous_on_device(values_in), index = contiguous_on_device(index_in);
  const int64_t rows = index.numel();
  const int64_t width = dst.numel() / std::max<int64_t>(rows, 1);
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(rows);
  if (lc.blocks == 0) return;
  visit_dtype(dst.dtype(), [&]<class T>() {
    put_kernel<T><<<lc.blocks, lc.threads, 0, current_stream(device)>>>(
        static_cast<const T*>(values.raw_data()), static_cast<const int64_t*>(index.raw_data()),
        static_cast<T*>(dst.raw_data()), rows, width);
  });
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

void var_grad(const Tensor& grad, const Tensor& x, const Tensor& mean, double scale, const Tensor& dx) {
  visit_floating(dx.dtype(), "var_grad", [&]<class T>() {
    using C = kernels::compute_t<T>;
    detail::map<T, T, 3>("var_grad", dx, {Operand(grad), Operand(x), Operand(mean)},
                         kernels::VarGrad<C>{static_cast<C>(scale)});
  });
}

void norm_grad(const Tensor& grad, const Tensor& x, const Tensor& norm, double p, const Tensor& dx) {
  visit_floating(dx.dtype(), "norm_grad", [&]<class T>() {
    using C = kernels::compute_t<T>;
    detail::map<T, T, 3>("norm_grad", dx, {Operand(grad), Operand(x), Operand(norm)},
                         kernels::NormGrad<C>{static_cast<C>(p)});
  });
}

void sum_channels(const Tensor& x_in, int64_t outer, int64_t channels, int64_t inner, const Tensor& out) {
  detail::check_same_device("sum_channels", x_in, out.device());
  const int device = out.device().index();
  DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  const Tensor x = contiguous_on_device(x_in);
  const ReducePlan p = cuda_plan::make_channel_plan(outer, channels, inner);
  visit_floating(x.dtype(), "sum_channels", [&]<class T>() {
    using A = kernels::compute_t<T>;
    finalize<A>(fold<T, A>(static_cast<const T*>(x.raw_data()), p, kernels::SumReducer<A>{}, nullptr, out.device(), stream),
                out, Post::none, 0, stream);
  });
}

void prod(const Tensor& x, Axis3 a, const Tensor& out) {
  const int64_t columns = a.outer * a.inner;
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(columns);
  if (lc.blocks == 0) return;
  LaunchOn on(out);
  visit_floating(out.dtype(), "prod", [&]<class T>() {
    prod_kernel<T><<<lc.blocks, lc.threads, 0, on.stream>>>(device_ptr<const T>(x), a, device_ptr<T>(out), columns);
  });
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

void prod_grad(const Tensor& g, const Tensor& x, Axis3 a, const Tensor& dx) {
  const int64_t columns = a.outer * a.inner;
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(columns);
  if (lc.blocks == 0 || a.axis == 0) return;
  LaunchOn on(dx);
  const Tensor prefix = empty(x.shape(), x.dtype() == DType::float64 ? DType::float64 : DType::float32, x.device());
  visit_floating(dx.dtype(), "prod_grad", [&]<class T>() {
    prod_grad_kernel<T><<<lc.blocks, lc.threads, 0, on.stream>>>(
        device_ptr<const T>(g), device_ptr<const T>(x), a, static_cast<kernels::compute_t<T>*>(prefix.raw_data()),
        device_ptr<T>(dx), columns);
  });
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

MIXGRAD_CUDA_KERNEL(reduce, reduce);
MIXGRAD_CUDA_KERNEL(arg_reduce, arg_reduce);
MIXGRAD_CUDA_KERNEL(put_along_last_axis, put_along_last_axis);
MIXGRAD_CUDA_KERNEL(var_grad, var_grad);
MIXGRAD_CUDA_KERNEL(norm_grad, norm_grad);
MIXGRAD_CUDA_KERNEL(sum_channels, sum_channels);
MIXGRAD_CUDA_KERNEL(prod, prod);
MIXGRAD_CUDA_KERNEL(prod_grad, prod_grad);

}  // namespace mixgrad::backend::cuda
