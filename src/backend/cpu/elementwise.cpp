// CPU elementwise kernels: the functors of kernels/{unary,binary}.hpp run
// through the map engine (map_loop.hpp). Each op enum indexes a table of
// function pointers, one template instantiation per functor, so adding an op
// is one functor and one table entry, not another branch in a switch.
// Kernels here never rely on floating-point exceptions: without trapping
// math GCC may compute both arms of a select (leaky_relu, the gradients of
// maximum / clamp, NaN-propagating max) and vectorise the loop, instead of
// branching per element. Scoped to this file; it precedes the includes so
// the templates instantiated here get it too.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <array>
#include <cstdint>
#include <string>

#include "backend/cpu/map_loop.hpp"
#include "backend/elementwise.hpp"
#include "backend/elementwise_tables.hpp"
#include "kernels/binary.hpp"
#include "kernels/unary.hpp"

namespace mixgrad::backend::cpu {

namespace {

using detail::map;

[[noreturn]] void unsupported(const char* what, DType t) {
  throw DTypeError(std::string(what) + ": no CPU kernel for dtype " + std::string(to_string(t)));
}

// Whether functor family F has a kernel for storage type T: floating types
// always, integers when the op is meaningful on them, bool never.
template <template <class> class F, class T>
constexpr bool has_kernel() {
  if constexpr (std::is_same_v<T, bool>) return false;
  else if constexpr (std::is_integral_v<T>) return F<T>::kIntegers;
  else return true;
}

// ---- unary -----------------------------------------------------------------

using UnaryFn = void (*)(const Tensor&, const Tensor&, const UnaryParams&);
using UnaryGradFn = void (*)(const Tensor&, const Tensor&, const Tensor&, const UnaryParams&);

template <template <class> class F>
void unary_kernel(const Tensor& x, const Tensor& out, const UnaryParams& params) {
  visit_dtype(out.dtype(), [&]<class T>() {
    if constexpr (has_kernel<F, T>()) {
      using C = kernels::compute_t<T>;
      const F<C> f = kernels::make_unary<F, C>(params);
      map<T, T, 1>(out, {Operand(x)}, [f](C v) { return f(v); });
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
      const F<C> f = kernels::make_unary<F, C>(params);
      map<T, T, 2>(dx, {Operand(grad), Operand(saved)}, [f](C g, C s) { return f.grad(g, s); });
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
      map<T, T, 2>(out, {a, b}, F<kernels::compute_t<T>>{});
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
    map<T, T, 3>(dx, {Operand(grad), x, y}, F<kernels::compute_t<T>>{});
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
  visit_dtype(operand_dtype(a, b), [&]<class T>() { map<T, bool, 2>(out, {a, b}, F<kernels::compute_t<T>>{}); });
}

using CompareFn = void (*)(const Operand&, const Operand&, const Tensor&);
template <template <class> class F>
struct CompareEntry {
  static constexpr CompareFn fn = &compare_kernel<F>;
};
constexpr auto kCompare = elementwise_tables::compare<CompareEntry>();

// ---- where -----------------------------------------------------------------

// A select moves elements without arithmetic, so it runs on the stored bits
// (an unsigned integer U of the element's size; 16-bit floats are not
// converted). Runs with a contiguous condition and output, and each value
// either contiguous or a broadcast scalar, get a vectorisable loop.
template <class U, bool kScalarA, bool kScalarB>
void select_run(U* o, const bool* c, const U* a, const U* b, int64_t n) {
  const kernels::Select<U> sel;
  for (int64_t i = 0; i < n; ++i) o[i] = sel(c[i], a[kScalarA ? 0 : i], b[kScalarB ? 0 : i]);
}

template <class U>
void where_run(std::array<char*, 4> p, const std::array<int64_t, 4>& st, int64_t n) {
  constexpr int64_t kU = sizeof(U);
  if (st[0] == kU && st[1] == 1 && (st[2] == kU || st[2] == 0) && (st[3] == kU || st[3] == 0)) {
    U* o = reinterpret_cast<U*>(p[0]);
    const bool* c = reinterpret_cast<const bool*>(p[1]);
    const U* a = reinterpret_cast<const U*>(p[2]);
    const U* b = reinterpret_cast<const U*>(p[3]);
    if (st[2] && st[3]) select_run<U, false, false>(o, c, a, b, n);
    else if (st[3]) select_run<U, true, false>(o, c, a, b, n);
    else if (st[2]) select_run<U, false, true>(o, c, a, b, n);
    else select_run<U, true, true>(o, c, a, b, n);
    return;
  }
  const kernels::Select<U> sel;
  for (int64_t i = 0; i < n; ++i)
    *reinterpret_cast<U*>(p[0] + i * st[0]) = sel(*reinterpret_cast<const bool*>(p[1] + i * st[1]),
                                                  *reinterpret_cast<const U*>(p[2] + i * st[2]),
                                                  *reinterpret_cast<const U*>(p[3] + i * st[3]));
}

template <size_t kBytes> struct bits_of;
template <> struct bits_of<1> { using type = uint8_t; };
template <> struct bits_of<2> { using type = uint16_t; };
template <> struct bits_of<4> { using type = uint32_t; };
template <> struct bits_of<8> { using type = uint64_t; };

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
  visit_dtype(out.dtype(), [&]<class T>() {
    std::array<T, 2> scalars{};
    std::array<Shape, 4> strides{byte_strides(out), detail::broadcast_byte_strides(cond, out.shape())};
    std::array<char*, 4> base{static_cast<char*>(out.raw_data()), static_cast<char*>(cond.raw_data())};
    const std::array<const Operand*, 2> ab{&a, &b};
    for (int k = 0; k < 2; ++k) {
      if (ab[k]->tensor) {
        strides[k + 2] = detail::broadcast_byte_strides(*ab[k]->tensor, out.shape());
        base[k + 2] = static_cast<char*>(ab[k]->tensor->raw_data());
      } else {
        scalars[k] = kernels::cast<T>(ab[k]->scalar);
        Shape zero = out.shape();
        for (int d = 0; d < zero.ndim(); ++d) zero[d] = 0;
        strides[k + 2] = zero;
        base[k + 2] = reinterpret_cast<char*>(&scalars[k]);
      }
    }
    kernels::for_each_run<4>(out.shape(), strides, base, &where_run<typename bits_of<sizeof(T)>::type>);
  });
}

}  // namespace mixgrad::backend::cpu

namespace mixgrad::backend {

constinit Stub<UnaryFn, 2> unary{"unary", cpu::unary};
constinit Stub<UnaryGradFn, 3> unary_grad{"unary_grad", cpu::unary_grad};
constinit Stub<BinaryFn, 3> binary{"binary", cpu::binary};
constinit Stub<BinaryGradFn, 4> binary_grad{"binary_grad", cpu::binary_grad};
constinit Stub<CompareFn, 3> compare{"compare", cpu::compare};
constinit Stub<WhereFn, 3> where{"where", cpu::where};

}  // namespace mixgrad::backend
