// CUDA elementwise kernels: the functors of kernels/{unary,binary}.hpp run
// through the grid-stride map engine (map.cuh), so both devices compute each
// element with the same code. As on the CPU (cpu/elementwise.cpp), each op
// enum indexes a table of function pointers, one instantiation per functor
// and dtype: no functor pairs, no dtype pairs.
#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "backend/cuda/map.cuh"
#include "backend/elementwise.hpp"
#include "backend/elementwise_tables.hpp"
#include "kernels/binary.hpp"
#include "kernels/unary.hpp"

namespace mixgrad::backend::cuda {

namespace {

using detail::map;

[[noreturn]] void unsupported(const char* what, DType t) {
  throw DTypeError(std::string(what) + ": no CUDA kernel for dtype " + std::string(to_string(t)));
}

// Whether functor family F has a kernel for storage type T: floating types
// always, integers when the op is meaningful on them, bool never (as the CPU).
template <template <class> class F, class T>
constexpr bool has_kernel() {
  if constexpr (std::is_same_v<T, bool>) return false;
  else if constexpr (std::is_integral_v<T>) return F<T>::kIntegers;
  else return true;
}

// Adaptors from a unary functor to the map engine's call (no device lambdas).
template <class F, class C>
struct Forward {
  F f;
  __device__ C operator()(C v) const { return f(v); }
};
template <class F, class C>
struct Backward {
  F f;
  __device__ C operator()(C g, C s) const { return f.grad(g, s); }
};

// ---- unary -----------------------------------------------------------------

using UnaryFn = void (*)(const Tensor&, const Tensor&, const UnaryParams&);
using UnaryGradFn = void (*)(const Tensor&, const Tensor&, const Tensor&, const UnaryParams&);

template <template <class> class F>
void unary_kernel(const Tensor& x, const Tensor& out, const UnaryParams& params) {
  visit_dtype(out.dtype(), [&]<class T>() {
    if constexpr (has_kernel<F, T>()) {
      using C = kernels::compute_t<T>;
      map<T, T, 1>("unary", out, {Operand(x)}, Forward<F<C>, C>{kernels::make_unary<F, C>(params)});
    } else {
      unsupported("unary", out.dtype());
    }
  });
}

template <template <class> class F>
void unary_grad_kernel(const Tensor& grad, const Tensor& saved, const Tensor& dx, const UnaryParams& params) {
  visit_dtype(dx.dtype(), [&]<class T>() {
    if constexpr (has_kernel<F, T>()) {
      using C = kernels::compute_t<T>;
      map<T, T, 2>("unary_grad", dx, {Operand(grad), Operand(saved)},
                   Backward<F<C>, C>{kernels::make_unary<F, C>(params)});
    } else {
      unsupported("unary_grad", dx.dtype());
    }
  });
}

template <template <class> class F>
struct UnaryForward {
  static constexpr UnaryFn fn = &unary_kernel<F>;
};
template <template <class> class F>
struct UnaryBackward {
  static constexpr UnaryGradFn fn = &unary_grad_kernel<F>;
};
constexpr auto kUnary = elementwise_tables::unary<UnaryForward>();
constexpr auto kUnaryGrad = elementwise_tables::unary<UnaryBackward>();

// ---- binary ----------------------------------------------------------------

using BinaryFn = void (*)(const Operand&, const Operand&, const Tensor&);

template <template <class> class F>
void binary_kernel(const Operand& a, const Operand& b, const Tensor& out) {
  visit_dtype(out.dtype(), [&]<class T>() {
    if constexpr (has_kernel<F, T>()) {
      map<T, T, 2>("binary", out, {a, b}, F<kernels::compute_t<T>>{});
    } else {
      unsupported("binary", out.dtype());
    }
  });
}

template <template <class> class F>
struct BinaryEntry {
  static constexpr BinaryFn fn = &binary_kernel<F>;
};
constexpr auto kBinary = elementwise_tables::binary<BinaryEntry>();

// Gradient functors are floating-only: integer tensors have no gradients.
template <template <class> class F>
void binary_grad_kernel(const Tensor& grad, const Operand& x, const Operand& y, const Tensor& dx) {
  visit_floating(dx.dtype(), "binary_grad", [&]<class T>() {
    map<T, T, 3>("binary_grad", dx, {Operand(grad), x, y}, F<kernels::compute_t<T>>{});
  });
}

using BinaryGradFn = void (*)(const Tensor&, const Operand&, const Operand&, const Tensor&);
template <template <class> class F>
struct BinaryGradEntry {
  static constexpr BinaryGradFn fn = &binary_grad_kernel<F>;
};
constexpr auto kBinaryGrad = elementwise_tables::binary_grad<BinaryGradEntry>();

// ---- comparisons -----------------------------------------------------------

DType operand_dtype(const Operand& a, const Operand& b) {
  if (a.tensor) return a.tensor->dtype();
  if (b.tensor) return b.tensor->dtype();
  return DType::float64;
}

template <template <class> class F>
void compare_kernel(const Operand& a, const Operand& b, const Tensor& out) {
  visit_dtype(operand_dtype(a, b),
              [&]<class T>() { map<T, bool, 2>("compare", out, {a, b}, F<kernels::compute_t<T>>{}); });
}

using CompareFn = void (*)(const Operand&, const Operand&, const Tensor&);
template <template <class> class F>
struct CompareEntry {
  static constexpr CompareFn fn = &compare_kernel<F>;
};
constexpr auto kCompare = elementwise_tables::compare<CompareEntry>();

// ---- where -----------------------------------------------------------------

template <size_t kBytes> struct bits_of;
template <> struct bits_of<1> { using type = uint8_t; };
template <> struct bits_of<2> { using type = uint16_t; };
template <> struct bits_of<4> { using type = uint32_t; };
template <> struct bits_of<8> { using type = uint64_t; };

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

void unary(UnaryOp op, const Tensor& x, const Tensor& out, const UnaryParams& params) {
  kUnary[static_cast<size_t>(op)](x, out, params);
}

void unary_grad(UnaryOp op, const Tensor& grad, const Tensor& saved, const Tensor& dx, const UnaryParams& params) {
  kUnaryGrad[static_cast<size_t>(op)](grad, saved, dx, params);
}

void binary(BinaryOp op, const Operand& a, const Operand& b, const Tensor& out) {
  kBinary[static_cast<size_t>(op)](a, b, out);
}

void binary_grad(BinaryGradOp op, const Tensor& grad, const Operand& x, const Operand& y, const Tensor& dx) {
  kBinaryGrad[static_cast<size_t>(op)](grad, x, y, dx);
}

void compare(CompareOp op, const Operand& a, const Operand& b, const Tensor& out) {
  kCompare[static_cast<size_t>(op)](a, b, out);
}

void where(const Tensor& cond, const Operand& a, const Operand& b, const Tensor& out) {
  visit_dtype(out.dtype(), [&]<class T>() { where_typed<T>(cond, a, b, out); });
}

const CudaKernel unary_on_cuda{backend::unary, unary};
const CudaKernel unary_grad_on_cuda{backend::unary_grad, unary_grad};
const CudaKernel binary_on_cuda{backend::binary, binary};
const CudaKernel binary_grad_on_cuda{backend::binary_grad, binary_grad};
const CudaKernel compare_on_cuda{backend::compare, compare};
const CudaKernel where_on_cuda{backend::where, where};

}  // namespace mixgrad::backend::cuda
