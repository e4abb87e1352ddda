// CUDA elementwise kernels: ElementwiseKernels (backend/elementwise_kernels.hpp),
// the CPU's too, runs the functors of kernels/{unary,binary}.hpp through the
// grid-stride map engine (map.cuh), so both devices compute each element with
// the same code: one instantiation per functor and dtype, no functor pairs,
// no dtype pairs. `where` is this file's own kernel.
#include <array>
#include <cstdint>
#include <cstring>

#include "backend/cuda/map.cuh"
#include "backend/elementwise.hpp"
#include "backend/elementwise_kernels.hpp"
#include "kernels/binary.hpp"

namespace mixgrad::backend::cuda {

namespace {

// The map engine as ElementwiseKernels calls it.
struct CudaMap {
  static constexpr const char* kDevice = "CUDA";
  template <class T, class O, int N, class Fn>
  static void map(const char* op, const Tensor& out, const std::array<Operand, N>& inputs, const Fn& fn) {
    detail::map<T, O, N>(op, out, inputs, fn);
  }
};

using Kernels = ElementwiseKernels<CudaMap>;

// ---- where -----------------------------------------------------------------

// The operands of where: pointers of out, cond, a, b; a scalar value (its
// stored bits) where a or b is a scalar.
template <class U>
struct WhereArgs {
  char* ptr[4] = {};
  U scalar[2] = {};
  bool is_scalar[2] = {};
};

// A select moves elements without arithmetic: it runs on the stored bits U
// (one instantiation per element size, not per dtype).
template <class U>
__global__ void where_kernel(cuda_plan::StridedIndexer<4> ix, WhereArgs<U> args, int64_t n) {
  const kernels::Select<U> sel;
  MIXGRAD_GRID_STRIDE_LOOP(i, n) {
    int64_t off[4];
    ix.offsets(i, off);
    const bool c = *reinterpret_cast<const bool*>(args.ptr[1] + off[1]);
    const U a = args.is_scalar[0] ? args.scalar[0] : *reinterpret_cast<const U*>(args.ptr[2] + off[2]);
    const U b = args.is_scalar[1] ? args.scalar[1] : *reinterpret_cast<const U*>(args.ptr[3] + off[3]);
    *reinterpret_cast<U*>(args.ptr[0] + off[0]) = sel(c, a, b);
  }
}

template <class T>
void where_typed(const Tensor& cond, const Operand& a, const Operand& b, const Tensor& out) {
  using U = typename bits_of<sizeof(T)>::type;
  static_assert(sizeof(T) == sizeof(U));
  detail::check_same_device("where", cond, out.device());
  std::array<Shape, 4> strides{byte_strides(out),
                               cuda_plan::broadcast_byte_strides(cond.shape(), cond.strides(), 1, out.shape())};
  WhereArgs<U> args;
  args.ptr[0] = static_cast<char*>(out.raw_data());
  args.ptr[1] = static_cast<char*>(cond.raw_data());
  const std::array<const Operand*, 2> ab{&a, &b};
  for (int k = 0; k < 2; ++k) {
    if (ab[k]->tensor) {
      const Tensor& t = *ab[k]->tensor;
      detail::check_same_device("where", t, out.device());
      strides[k + 2] = cuda_plan::broadcast_byte_strides(t.shape(), t.strides(), element_size(t.dtype()), out.shape());
      args.ptr[k + 2] = static_cast<char*>(t.raw_data());
    } else {
      const T v = kernels::cast<T>(ab[k]->scalar);
      std::memcpy(&args.scalar[k], &v, sizeof(U));
      args.is_scalar[k] = true;
      Shape zero = out.shape();
      for (int d = 0; d < zero.ndim(); ++d) zero[d] = 0;
      strides[k + 2] = zero;
    }
  }
  const int64_t n = out.numel();
  const cuda_plan::LaunchConfig lc = cuda_plan::launch_config(n);
  if (lc.blocks == 0) return;
  const int device = out.device().index();
  DeviceGuard guard(device);
  const auto ix = cuda_plan::make_indexer<4>(out.shape(), strides);
  where_kernel<U><<<lc.blocks, lc.threads, 0, current_stream(device)>>>(ix, args, n);
  MIXGRAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void where(const Tensor& cond, const Operand& a, const Operand& b, const Tensor& out) {
  visit_dtype(out.dtype(), [&]<class T>() { where_typed<T>(cond, a, b, out); });
}

MIXGRAD_CUDA_KERNEL(unary, Kernels::unary);
MIXGRAD_CUDA_KERNEL(unary_grad, Kernels::unary_grad);
MIXGRAD_CUDA_KERNEL(binary, Kernels::binary);
MIXGRAD_CUDA_KERNEL(binary_grad, Kernels::binary_grad);
MIXGRAD_CUDA_KERNEL(compare, Kernels::compare);
MIXGRAD_CUDA_KERNEL(where, where);

}  // namespace mixgrad::backend::cuda
