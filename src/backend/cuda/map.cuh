// The CUDA elementwise engine, the device twin of cpu/map_loop.hpp:
// out[i] = fn(in_0[i], ..., in_{N-1}[i]) over broadcast, strided inputs, for
// any functor of kernels/*.hpp, as a grid-stride loop whose index plan is
// cuda_plan::StridedIndexer (plan.hpp, host-tested).
//
//   map<float, float, 2>(out, {Operand(a), Operand(2.0)}, kernels::Mul<float>{});
//
// Inputs are read as T and computed in C = compute_t<T> (float for the 16-bit
// floats, as on the CPU); the functor's result is stored as O. Scalar
// operands travel in the kernel's arguments, converted to T first so they
// round like the tensor's elements. Included by the .cu files only.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <string>
#include <utility>

#include "backend/copy.hpp"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/check.hpp"
#include "backend/cuda/plan.hpp"
#include "backend/cuda/stream.hpp"
#include "backend/elementwise.hpp"
#include "kernels/cast.hpp"

namespace mixgrad::backend::cuda::detail {

/// The operands of a map kernel: out's pointer first, then one per input;
/// a scalar input has no pointer and its value in `scalar`.
template <class T, int N>
struct MapArgs {
  char* ptr[N + 1] = {};
  T scalar[N] = {};
  bool is_scalar[N] = {};
};

template <class T, int N, class Fn, size_t... I>
__device__ __forceinline__ auto apply_map(const Fn& fn, const kernels::compute_t<T> (&v)[N], std::index_sequence<I...>) {
  return fn(v[I]...);
}

template <class T, class O, int N, class Fn>
__global__ void map_kernel(cuda_plan::StridedIndexer<N + 1> ix, MapArgs<T, N> args, Fn fn, int64_t n) {
  using C = kernels::compute_t<T>;
  MIXGRAD_GRID_STRIDE_LOOP(i, n) {
    int64_t off[N + 1];
    ix.offsets(i, off);
    C v[N];
#pragma unroll
    for (int k = 0; k < N; ++k)
      v[k] = kernels::cast<C>(args.is_scalar[k] ? args.scalar[k]
                                                : *reinterpret_cast<const T*>(args.ptr[k + 1] + off[k + 1]));
    *reinterpret_cast<O*>(args.ptr[0] + off[0]) = kernels::cast<O>(apply_map<T, N>(fn, v, std::make_index_sequence<N>{}));
  }
}

/// DeviceError naming `op` unless `t` is on `device`.
inline void check_same_device(const char* op, const Tensor& t, const Device& device) {
  if (t.device() != device)
    throw DeviceError(std::string(op) + ": operand " + to_string(t.device()) + " while the output is on " +
                      to_string(device) + "; move it with Tensor::to(Device) first");
}

/// out[i] = fn(inputs[0][i], ...) with broadcasting, on out's device and its
/// current stream.
template <class T, class O, int N, class Fn>
void map(const char* op, const Tensor& out, const std::array<Operand, N>& inputs, const Fn& fn) {
  std::array<Shape, N + 1> strides;
  MapArgs<T, N> args;
  strides[0] = byte_strides(out);
  args.ptr[0] = static_cast<char*>(out.raw_data());
  for (int k = 0; k < N; ++k) {
    if (inputs[k].tensor) {
      const Tensor& t = *inputs[k].tensor;
      check_same_device(op, t, out.device());
      strides[k + 1] = cuda_plan::broadcast_byte_strides(t.shape(), t.strides(), element_size(t.dtype()), out.shape());
      args.ptr[k + 1] = static_cast<char*>(t.raw_data());
    } else {
      args.scalar[k] = kernels::cast<T>(inputs[k].scalar);
      args.is_scalar[k] = true;
      Shape zero = out.shape();
      for (int d = 0; d < zero.ndim(); ++d) zero[d] = 0;
      strides[k + 1] = zero;
    }
  }
  const int64_t n = out.numel();
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(n);
  if (lc.blocks == 0) return;
  const int device = out.device().index();
  DeviceGuard guard(device);
  const auto ix = cuda_plan::make_indexer<N + 1>(out.shape(), strides);
  map_kernel<T, O, N, Fn><<<lc.blocks, lc.threads, 0, current_stream(device)>>>(ix, args, fn, n);
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace mixgrad::backend::cuda::detail
