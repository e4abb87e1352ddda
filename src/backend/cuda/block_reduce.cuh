// Device helpers of the CUDA row kernels: a block-wide reduction whose result
// every thread of the block receives (CUB BlockReduce, then a broadcast
// through shared memory). Blocks have cuda_plan::kRowThreads threads.
//
//   const float total = block_all_reduce(partial, SumOp{});   // in every thread
#pragma once

#include <cub/block/block_reduce.cuh>

#include "backend/cuda/row_plan.hpp"

namespace mixgrad::backend::cuda {

struct SumOp {
  template <class T>
  __device__ T operator()(const T& a, const T& b) const { return a + b; }
};

/// The larger; a NaN on the left is kept (as std::max(acc, v) does).
struct MaxOp {
  template <class T>
  __device__ T operator()(const T& a, const T& b) const { return a < b ? b : a; }
};

/// Reduces one value per thread over the block and returns the result in
/// every thread. All threads of the block must call it (it synchronises);
/// successive calls may reuse its storage.
template <class T, class Op>
__device__ T block_all_reduce(T v, Op op) {
  using Reduce = cub::BlockReduce<T, cuda_plan::kRowThreads>;
  __shared__ typename Reduce::TempStorage temp;
  __shared__ T result;
  const T r = Reduce(temp).Reduce(v, op);
  if (threadIdx.x == 0) result = r;
  __syncthreads();
  const T out = result;
  __syncthreads();
  return out;
}

}  // namespace mixgrad::backend::cuda
